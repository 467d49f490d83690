package runtime

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// selfSignedFiles writes a certificate for 127.0.0.1 and its key.
func selfSignedFiles(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

func TestWSSServesTheSameProtocolOverTLS(t *testing.T) {
	certFile, keyFile, pool := selfSignedFiles(t)
	l, stop := wsBroker(t, func(c *BrokerConfig) {
		// The overlay CA is required with the broker certificate; the web
		// listener uses the certificate and key only.
		c.TLS.CertFile, c.TLS.KeyFile, c.TLS.CAFile = certFile, keyFile, certFile
	})
	defer stop()
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	dial := func() *wsClient {
		ctx, cancel := testCtx(t)
		defer cancel()
		c, _, err := websocket.Dial(ctx, "wss://"+l.Addr()+WSPath, &websocket.DialOptions{HTTPClient: hc})
		if err != nil {
			t.Fatal(err)
		}
		return &wsClient{t, c}
	}
	sub := dial()
	sub.hello("")
	sub.send(`{"type":"subscribe","id":1,"filter":"[class,eq,'A']"}`)
	sub.until("suback")
	pub := dial()
	pub.hello("p")
	pub.send(`{"type":"publish","seq":1,"attrs":{"class":"A"},"payload":"over tls"}`)
	if d := sub.until("deliver"); d["payload"] != "over tls" {
		t.Fatalf("delivery %v", d)
	}
	// Plain ws is not served on a TLS listener.
	ctx, cancel := testCtx(t)
	defer cancel()
	if c, _, err := websocket.Dial(ctx, "ws://"+l.Addr()+WSPath, nil); err == nil {
		c.CloseNow()
		t.Error("plain ws accepted on the wss listener")
	}
}
