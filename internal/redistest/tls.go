package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// tlsMode says whether and how a server speaks TLS.
type tlsMode int

const (
	tlsOff        tlsMode = iota
	tlsServer             // clients verify the server; the server asks nothing
	tlsClientAuth         // the server also requires a client certificate
)

// Files WithTLS writes into a server's Dir, all PEM.
const (
	CAFile         = "ca.crt"     // the test CA, trusted by both sides
	ServerCertFile = "server.crt" // the server's chain (leaf only)
	ServerKeyFile  = "server.key"
	ClientCertFile = "client.crt" // written with WithTLSClientAuth only
	ClientKeyFile  = "client.key"
)

// certLife is how long the generated certificates are valid. Test binaries
// do not live that long; the hour before now absorbs clock skew.
const certLife = 24 * time.Hour

// WithTLS makes the server speak TLS only: its port is a TLS port
// (--tls-port) and the plain-text port is closed (--port 0). A CA and a
// server certificate for 127.0.0.1 and localhost (ECDSA P-256) are generated
// into the server's Dir; [Server.Client] and [Server.TLSConfig] trust that
// CA. Clients need no certificate (--tls-auth-clients no).
//
// TLS applies to [Start] and [StartMasters]; clusters are not TLS.
func WithTLS() Option {
	return func(c *config) {
		if c.tls == tlsOff {
			c.tls = tlsServer
		}
	}
}

// WithTLSClientAuth is [WithTLS] with mutual TLS: the server rejects
// clients that do not present a certificate signed by the generated CA
// (--tls-auth-clients yes). A client certificate is generated too, and
// [Server.TLSConfig] presents it.
func WithTLSClientAuth() Option {
	return func(c *config) { c.tls = tlsClientAuth }
}

// TLSConfig returns a new client TLS configuration for s: it trusts only
// the server's generated CA, verifies the server's name (127.0.0.1, the
// address's host), and, with [WithTLSClientAuth], presents the client
// certificate. It returns nil when s does not speak TLS. Each call returns
// a fresh copy, which the caller may modify.
func (s *Server) TLSConfig() *tls.Config {
	if s.tlsConf == nil {
		return nil
	}
	return s.tlsConf.Clone()
}

// TLSFile returns the path of one of the PEM files generated for s
// ([CAFile], [ServerCertFile], ...), for tests that configure a client
// from files, as a deployment would. It returns "" when s does not speak
// TLS.
func (s *Server) TLSFile(name string) string {
	if s.tlsConf == nil {
		return ""
	}
	return filepath.Join(s.Dir, name)
}

// tlsArgs returns the redis-server arguments of a TLS server.
func (s *Server) tlsArgs() []string {
	auth := "no"
	if s.cfg.tls == tlsClientAuth {
		auth = "yes"
	}
	return []string{
		"--port", "0", // no plain-text listener: every byte goes over TLS
		"--tls-port", strconv.Itoa(s.Port),
		"--tls-cert-file", filepath.Join(s.Dir, ServerCertFile),
		"--tls-key-file", filepath.Join(s.Dir, ServerKeyFile),
		"--tls-ca-cert-file", filepath.Join(s.Dir, CAFile),
		"--tls-auth-clients", auth,
	}
}

// makeTLS generates a CA, a server certificate signed by it and, when
// clientAuth is set, a client certificate, writes them into dir and returns
// the client configuration that goes with them.
func makeTLS(dir string, clientAuth bool) (*tls.Config, error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "redistest CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(certLife),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true, // it signs leaves only
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caCert, err := signCert(caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	if err := writePEM(dir, CAFile, "CERTIFICATE", caCert.Raw, 0o644); err != nil {
		return nil, err
	}

	leaf := func(cn string, usage x509.ExtKeyUsage, certFile, keyFile string) (tls.Certificate, error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return tls.Certificate{}, err
		}
		tmpl := &x509.Certificate{
			Subject:     pkix.Name{CommonName: cn},
			NotBefore:   now.Add(-time.Hour),
			NotAfter:    now.Add(certLife),
			KeyUsage:    x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{usage},
		}
		if usage == x509.ExtKeyUsageServerAuth {
			tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
			tmpl.DNSNames = []string{"localhost"}
		}
		cert, err := signCert(tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			return tls.Certificate{}, fmt.Errorf("%s certificate: %w", cn, err)
		}
		der, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return tls.Certificate{}, err
		}
		if err := writePEM(dir, certFile, "CERTIFICATE", cert.Raw, 0o644); err != nil {
			return tls.Certificate{}, err
		}
		if err := writePEM(dir, keyFile, "PRIVATE KEY", der, 0o600); err != nil {
			return tls.Certificate{}, err
		}
		return tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}, nil
	}
	if _, err := leaf("redistest server", x509.ExtKeyUsageServerAuth, ServerCertFile, ServerKeyFile); err != nil {
		return nil, err
	}

	roots := x509.NewCertPool()
	roots.AddCert(caCert)
	conf := &tls.Config{
		RootCAs:    roots,
		MinVersion: tls.VersionTLS12,
		// The servers listen on 127.0.0.1; naming it lets a tls.Client made
		// from this config verify the server without being told the host.
		ServerName: "127.0.0.1",
	}
	if clientAuth {
		c, err := leaf("redistest client", x509.ExtKeyUsageClientAuth, ClientCertFile, ClientKeyFile)
		if err != nil {
			return nil, err
		}
		conf.Certificates = []tls.Certificate{c}
	}
	return conf, nil
}

// signCert creates the certificate tmpl for pub, signed by parent's key
// priv, with a random serial number.
func signCert(tmpl, parent *x509.Certificate, pub any, priv *ecdsa.PrivateKey) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	tmpl.SerialNumber = serial
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, priv)
	if err != nil {
		return nil, err
	}
	return x509.ParseCertificate(der)
}

func writePEM(dir, name, kind string, der []byte, perm os.FileMode) error {
	data := pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})
	if data == nil {
		return errors.New("encoding " + name)
	}
	return os.WriteFile(filepath.Join(dir, name), data, perm)
}

// tlsBuilds records, by server binary, whether it was built without TLS.
var tlsBuilds sync.Map // path -> bool (true: no TLS)

// NeedTLS skips t when the redis-server in use ([ServerPath]) was built
// without TLS, as the CI matrix builds its servers: such a server refuses
// to start with a TLS port. It starts one TLS server per binary to find
// out. A server that fails to start for another reason does not skip t.
func NeedTLS(t testing.TB) {
	t.Helper()
	Need(t)
	path, _ := ServerPath()
	v, ok := tlsBuilds.Load(path)
	if !ok {
		noTLS := false
		s, err := startServer(newConfig([]Option{WithTLS()}))
		if err == nil {
			_ = s.shutdown()
		} else {
			noTLS = strings.Contains(err.Error(), "TLS support")
		}
		v, _ = tlsBuilds.LoadOrStore(path, noTLS)
	}
	if v.(bool) {
		t.Skipf("redistest: %s was built without TLS", path)
	}
}
