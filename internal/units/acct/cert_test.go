package acct

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/units/api"
	"github.com/wattrace/wattrace/internal/units/unitstest"
	"github.com/wattrace/wattrace/pkg/units"
)

// issue makes a certificate for cn signed by ca (self-signed when ca is
// nil) and returns it with its key.
func issue(t *testing.T, cn string, ca *x509.Certificate, caKey *ecdsa.PrivateKey, isCA bool) (*x509.Certificate, *ecdsa.PrivateKey, []byte, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: isCA, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if ca == nil {
		ca, caKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	kb, _ := x509.MarshalECPrivateKey(key)
	return cert, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
}

// --cert/--key: the user's own certificate and key (mode 0600, the
// user's), read by acct with the user's rights; the server's verified CN
// is the user, who sees their jobs only.
func TestClientCertificate(t *testing.T) {
	ca, caKey, _, _ := issue(t, "test CA", nil, nil, true)
	_, _, certPEM, keyPEM := issue(t, "alice", ca, caKey, false)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	a, err := api.New(unitstest.Store(t, unitstest.Fixture(now)), api.Config{
		Access: api.Access{UserHeader: api.DefaultUserHeader},
		Now:    func() time.Time { return now },
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewUnstartedServer(a.Handler())
	s.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool}
	s.StartTLS()
	defer s.Close()
	dir := t.TempDir()
	serverCA := filepath.Join(dir, "server.pem")
	writeTest(t, serverCA, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})))
	cert, key := filepath.Join(dir, "alice.pem"), filepath.Join(dir, "alice.key")
	writeTest(t, cert, string(certPEM))
	writeTest(t, key, string(keyPEM))
	cfg := filepath.Join(dir, "acct.yaml")
	writeTest(t, cfg, "url: "+s.URL+"\nca_file: "+serverCA+"\n")
	out, stderr, code := runAs(t, "alice", "--config", cfg, "--cert", cert, "--key", key, "--starttime=now-2d", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var us []units.Unit
	if err := json.Unmarshal([]byte(out), &us); err != nil || len(us) != 2 || us[0].User != "alice" || us[1].User != "alice" {
		t.Fatalf("alice by certificate: %v %s", err, out)
	}
	// Without the certificate the TLS server refuses the handshake.
	if _, stderr, code := runAs(t, "alice", "--config", cfg, "--auth", "token", "--token", "x"); code == 0 {
		t.Errorf("no certificate: exit 0 %s", stderr)
	}
}
