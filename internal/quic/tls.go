package quic

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"os"
	"time"

	"github.com/deltapub/deltapub/message"
	"github.com/quic-go/quic-go"
)

// ekmLabel is the TLS exporter label of the broker authentication; fixed,
// so both sides derive the same keying material from the session.
const ekmLabel = "EXPORTER-deltapub-broker-auth"

// Roles bound into the HMAC, so that a dialler's proof can never be
// reflected back as an acceptor's.
const (
	roleDialer   = "dialer"
	roleAcceptor = "acceptor"
)

// authProof is HMAC-SHA256(secret, ekm || role || id).
func authProof(secret, ekm []byte, role string, id message.BrokerID) []byte {
	mac := hmac.New(sha256.New, secret)
	mac.Write(ekm)
	mac.Write([]byte(role))
	mac.Write([]byte{0}) // separator: role and id cannot run into each other
	mac.Write([]byte(id))
	return mac.Sum(nil)
}

func exportEKM(qc *quic.Conn) ([]byte, error) {
	cs := qc.ConnectionState().TLS
	ekm, err := cs.ExportKeyingMaterial(ekmLabel, nil, 32)
	if err != nil {
		return nil, fmt.Errorf("quic: export keying material: %w", err)
	}
	return ekm, nil
}

// selfSigned makes an ephemeral certificate for one endpoint's life.
func selfSigned() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "deltapub"},
		DNSNames:     []string{"deltapub"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(10 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// tlsConfigs returns the server and client TLS configurations of an
// endpoint.
func tlsConfigs(cfg *Config) (server, client *tls.Config, err error) {
	if cfg.CertFile != "" {
		return mutualTLS(cfg)
	}
	cert, err := selfSigned()
	if err != nil {
		return nil, nil, fmt.Errorf("quic: certificate: %w", err)
	}
	server = &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		NextProtos:   []string{ALPNBroker, ALPNClient},
	}
	client = &tls.Config{
		MinVersion: tls.VersionTLS13,
		// Not verifying the server's (ephemeral, self-signed) certificate is
		// acceptable ONLY because broker links are authenticated by the
		// HMAC over this session's exported keying material (see the package
		// comment): an impostor or a man in the middle fails that check.
		InsecureSkipVerify: true, //nolint:gosec // see above
		ServerName:         "deltapub",
		NextProtos:         []string{ALPNBroker},
	}
	return server, client, nil
}

// mutualTLS: both sides present a certificate signed by the overlay CA and
// verify the other's against it. Host names are not checked (brokers move
// between addresses); the CA is the trust anchor.
func mutualTLS(cfg *Config) (server, client *tls.Config, err error) {
	cert, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("quic: CertFile/KeyFile: %w", err)
	}
	caPEM, err := os.ReadFile(cfg.CAFile)
	if err != nil {
		return nil, nil, fmt.Errorf("quic: CAFile: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, nil, fmt.Errorf("quic: CAFile %s: no PEM certificate in it", cfg.CAFile)
	}
	verify := func(raw [][]byte, _ [][]*x509.Certificate) error {
		if len(raw) == 0 {
			return errors.New("quic: peer sent no certificate")
		}
		leaf, err := x509.ParseCertificate(raw[0])
		if err != nil {
			return err
		}
		inter := x509.NewCertPool()
		for _, r := range raw[1:] {
			if c, err := x509.ParseCertificate(r); err == nil {
				inter.AddCert(c)
			}
		}
		_, err = leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
		if err != nil {
			return fmt.Errorf("quic: peer certificate not signed by the overlay CA: %w", err)
		}
		return nil
	}
	server = &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		NextProtos:   []string{ALPNBroker, ALPNClient},
		// Clients (ALPN deltapub-client) may come without a certificate;
		// broker links are checked in the handshake (brokerCertOK).
		ClientAuth: tls.RequestClientCert,
		VerifyPeerCertificate: func(raw [][]byte, c [][]*x509.Certificate) error {
			if len(raw) == 0 {
				return nil
			}
			return verify(raw, c)
		},
	}
	client = &tls.Config{
		MinVersion:            tls.VersionTLS13,
		Certificates:          []tls.Certificate{cert},
		InsecureSkipVerify:    true, //nolint:gosec // verified by VerifyPeerCertificate against the CA
		VerifyPeerCertificate: verify,
		ServerName:            "deltapub",
		NextProtos:            []string{ALPNBroker},
	}
	return server, client, nil
}

// quicConfig is the QUIC configuration of every deltapub connection.
func quicConfig(cfg *Config, server bool) *quic.Config {
	qc := &quic.Config{
		HandshakeIdleTimeout:           cfg.HandshakeTimeout,
		MaxIdleTimeout:                 cfg.IdleTimeout,
		KeepAlivePeriod:                cfg.IdleTimeout / 3,
		InitialStreamReceiveWindow:     initialStreamWindow,
		MaxStreamReceiveWindow:         maxStreamWindow,
		InitialConnectionReceiveWindow: initialConnWindow,
		MaxConnectionReceiveWindow:     maxConnWindow,
		MaxIncomingUniStreams:          -1,
	}
	if server {
		qc.MaxIncomingStreams = 1 // the one stream the dialler opens
	} else {
		qc.MaxIncomingStreams = -1
	}
	return qc
}
