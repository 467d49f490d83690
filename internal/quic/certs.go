// Certificates for mutual TLS between brokers: an overlay CA and one
// certificate per broker signed by it (deltapub certs).

package quic

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// MakeCerts makes an overlay CA in dir (reused if dir/ca.pem and
// dir/ca-key.pem exist) and, for each broker ID of ids, a certificate signed
// by it valid for valid (dir/ID.pem, dir/ID-key.pem); it writes one line per
// file pair made to w. Brokers given those files (cert_file, key_file,
// ca_file) accept only links from holders of such certificates.
func MakeCerts(dir string, ids []string, valid time.Duration, w io.Writer) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	caCert, caKey, err := loadOrMakeCA(dir, valid, w)
	if err != nil {
		return err
	}
	for _, id := range ids {
		id = strings.TrimSpace(id)
		if id == "" || strings.ContainsAny(id, `/\. `) {
			return fmt.Errorf("certs: bad broker ID %q", id)
		}
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tmpl := &x509.Certificate{
			SerialNumber: serial(), Subject: pkix.Name{CommonName: id},
			DNSNames: []string{id}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(valid),
			KeyUsage:    x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			return fmt.Errorf("certs: %s: %w", id, err)
		}
		if err := writePEM(filepath.Join(dir, id+".pem"), "CERTIFICATE", der, 0o644); err != nil {
			return err
		}
		kd, _ := x509.MarshalECPrivateKey(key)
		if err := writePEM(filepath.Join(dir, id+"-key.pem"), "EC PRIVATE KEY", kd, 0o600); err != nil {
			return err
		}
		fmt.Fprintf(w, "%s: %s, %s\n", id, filepath.Join(dir, id+".pem"), filepath.Join(dir, id+"-key.pem"))
	}
	return nil
}

func loadOrMakeCA(dir string, valid time.Duration, w io.Writer) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	certPath, keyPath := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem")
	if cb, err := os.ReadFile(certPath); err == nil {
		kb, err := os.ReadFile(keyPath)
		if err != nil {
			return nil, nil, fmt.Errorf("certs: %s exists but %s: %w", certPath, keyPath, err)
		}
		cp, _ := pem.Decode(cb)
		kp, _ := pem.Decode(kb)
		if cp == nil || kp == nil {
			return nil, nil, fmt.Errorf("certs: %s or %s is not PEM", certPath, keyPath)
		}
		cert, err := x509.ParseCertificate(cp.Bytes)
		if err != nil {
			return nil, nil, fmt.Errorf("certs: %s: %w", certPath, err)
		}
		key, err := x509.ParseECPrivateKey(kp.Bytes)
		if err != nil {
			return nil, nil, fmt.Errorf("certs: %s: %w", keyPath, err)
		}
		return cert, key, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "deltapub overlay CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(valid),
		IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	cert, _ := x509.ParseCertificate(der)
	if err := writePEM(certPath, "CERTIFICATE", der, 0o644); err != nil {
		return nil, nil, err
	}
	kd, _ := x509.MarshalECPrivateKey(key)
	if err := writePEM(keyPath, "EC PRIVATE KEY", kd, 0o600); err != nil {
		return nil, nil, err
	}
	fmt.Fprintf(w, "CA: %s (keep %s private)\n", certPath, keyPath)
	return cert, key, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	return n
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode); err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	return nil
}
