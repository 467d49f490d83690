package quic

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// writeCA makes a CA and n leaf certificates signed by it in dir; it
// returns the CA file and the cert/key files of each leaf.
func writeCA(t *testing.T, dir, name string, n int) (ca string, certs, keys []string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	write := func(file, typ string, der []byte) string {
		p := filepath.Join(dir, file)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ca = write(name+"-ca.pem", "CERTIFICATE", caDER)
	for i := 0; i < n; i++ {
		k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(int64(i + 2)), Subject: pkix.Name{CommonName: "broker"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage:    x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kd, _ := x509.MarshalECPrivateKey(k)
		certs = append(certs, write(name+"-"+string(rune('a'+i))+".pem", "CERTIFICATE", der))
		keys = append(keys, write(name+"-"+string(rune('a'+i))+"-key.pem", "EC PRIVATE KEY", kd))
	}
	return ca, certs, keys
}

func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca, certs, keys := writeCA(t, dir, "overlay", 2)
	otherCA, otherCerts, otherKeys := writeCA(t, dir, "other", 1)
	withCert := func(ca, cert, key string) func(*Config) {
		return func(c *Config) { c.CAFile, c.CertFile, c.KeyFile = ca, cert, key }
	}
	a := start(t, "B1", "", withCert(ca, certs[0], keys[0]))
	b := start(t, "B2", "", withCert(ca, certs[1], keys[1]))
	if _, err := b.ep.Dial(ctx10(t), "B1", a.addr()); err != nil {
		t.Fatalf("link between two brokers of the overlay CA: %v", err)
	}
	c := start(t, "B3", "", withCert(otherCA, otherCerts[0], otherKeys[0]))
	if _, err := c.ep.Dial(ctx10(t), "B1", a.addr()); err == nil {
		t.Fatal("a broker of another CA linked")
	}
	// A broker with the ephemeral certificate and no secret cannot link either.
	d := start(t, "B4", "", nil)
	_, err := d.ep.Dial(ctx10(t), "B1", a.addr())
	if err == nil {
		t.Fatal("a broker without a certificate linked")
	}
	var re *RefusedError
	if !errors.As(err, &re) && !errors.Is(err, ErrRefused) {
		t.Logf("refusal surfaced as %v", err) // TLS-level failures are not RefusedErrors
	}
	// Clients need no certificate.
	if cc, err := DialClient(ctx10(t), a.addr(), ""); err != nil {
		t.Fatalf("client to an mTLS broker: %v", err)
	} else {
		cc.Close()
	}
	if _, err := (&Config{CertFile: "x", Listen: "127.0.0.1:0", ID: "B9"}).fillErr(); err == nil {
		t.Fatal("CertFile without KeyFile and CAFile accepted")
	}
}

func (c *Config) fillErr() (*Config, error) { return c, c.fill() }
