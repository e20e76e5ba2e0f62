package ctl

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// testCA writes a self-signed CA certificate and its key (as encodeKey renders it)
// into dir and returns their paths.
func testCA(t *testing.T, dir, name string, key crypto.Signer, encodeKey func(crypto.Signer) []byte, isCA bool, notAfter time.Time) (certPath, keyPath string) {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: notAfter,
		IsCA: isCA, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	certPath, keyPath = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, encodeKey(key), 0o600); err != nil {
		t.Fatal(err)
	}
	return certPath, keyPath
}

func pkcs1(k crypto.Signer) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k.(*rsa.PrivateKey))})
}

func pkcs8(k crypto.Signer) []byte {
	der, _ := x509.MarshalPKCS8PrivateKey(k)
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

// sec1 is what `openssl ecparam -genkey` writes: EC PARAMETERS, then the key.
func sec1(k crypto.Signer) []byte {
	der, _ := x509.MarshalECPrivateKey(k.(*ecdsa.PrivateKey))
	return append(pem.EncodeToMemory(&pem.Block{Type: "EC PARAMETERS", Bytes: []byte{0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07}}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})...)
}

func mustRSA(t *testing.T) crypto.Signer {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func mustEC(t *testing.T) crypto.Signer {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestAgentKubeconfig: with RSA and EC CAs in every PEM key format, the kubeconfig
// holds a fresh P-256 key and a client certificate for the agent's user and group,
// signed by the CA, and a TLS server that trusts only that CA accepts it.
func TestAgentKubeconfig(t *testing.T) {
	dir := t.TempDir()
	rsaKey, ecKey := mustRSA(t), mustEC(t)
	year := time.Now().Add(2 * 8760 * time.Hour)
	for name, enc := range map[string]struct {
		key    crypto.Signer
		encode func(crypto.Signer) []byte
	}{
		"rsa-pkcs1": {rsaKey, pkcs1}, "rsa-pkcs8": {rsaKey, pkcs8},
		"ec-sec1": {ecKey, sec1}, "ec-pkcs8": {ecKey, pkcs8},
	} {
		t.Run(name, func(t *testing.T) {
			caCert, caKey := testCA(t, dir, name, enc.key, enc.encode, true, year)
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = w.Write([]byte(r.TLS.PeerCertificates[0].Subject.CommonName))
			}))
			caData, _ := os.ReadFile(caCert)
			clientCAs := x509.NewCertPool()
			clientCAs.AppendCertsFromPEM(caData)
			srv.TLS = &tls.Config{ClientCAs: clientCAs, ClientAuth: tls.RequireAndVerifyClientCert}
			srv.StartTLS()
			defer srv.Close()
			bundle := filepath.Join(dir, name+"-server-ca.crt")
			_ = os.WriteFile(bundle, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644)

			out := filepath.Join(dir, name+".kubeconfig")
			_ = os.WriteFile(out, []byte("old"), 0o644) // a wider mode is tightened
			var stdout, stderr bytes.Buffer
			if code := Run([]string{"agent", "kubeconfig", "--node", "worker-1.rack2", "--ca-cert", caCert, "--ca-key", caKey,
				"--server", srv.URL, "--ca-bundle", bundle, "--tls-server-name", "example.com", "--validity", "48h", "--out", out}, &stdout, &stderr); code != 0 {
				t.Fatalf("exit %d: %s", code, stderr.String())
			}
			if fi, err := os.Stat(out); err != nil || fi.Mode().Perm() != 0o600 {
				t.Fatalf("--out: %v, mode %v; want 0600", err, fi.Mode())
			}
			kc, err := clientcmd.LoadFromFile(out)
			if err != nil {
				t.Fatal(err)
			}
			ctx := kc.Contexts[kc.CurrentContext]
			cl, user := kc.Clusters[ctx.Cluster], kc.AuthInfos[ctx.AuthInfo]
			if cl.Server != srv.URL || cl.TLSServerName != "example.com" || cl.InsecureSkipTLSVerify {
				t.Errorf("cluster = %+v", cl)
			}
			block, _ := pem.Decode(user.ClientCertificateData)
			cert, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			if cert.Subject.CommonName != "system:baremetal-ccm-agent:worker-1.rack2" || !slices.Equal(cert.Subject.Organization, []string{"system:baremetal-ccm-agents"}) {
				t.Errorf("subject = %s", cert.Subject)
			}
			if !slices.Equal(cert.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) || cert.IsCA {
				t.Errorf("ext key usage %v, CA %v; want client auth only", cert.ExtKeyUsage, cert.IsCA)
			}
			if d := time.Until(cert.NotAfter); d < 47*time.Hour || d > 48*time.Hour {
				t.Errorf("certificate valid for %s more, want 48h", d)
			}
			if pub, ok := cert.PublicKey.(*ecdsa.PublicKey); !ok || pub.Curve != elliptic.P256() {
				t.Errorf("client key %T, want ECDSA P-256", cert.PublicKey)
			}
			if _, err := tls.X509KeyPair(user.ClientCertificateData, user.ClientKeyData); err != nil {
				t.Errorf("key does not match the certificate: %v", err)
			}
			if _, err := cert.Verify(x509.VerifyOptions{Roots: clientCAs, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
				t.Errorf("not signed by the CA: %v", err)
			}

			cfg, err := clientcmd.BuildConfigFromFlags("", out)
			if err != nil {
				t.Fatal(err)
			}
			hc, err := rest.HTTPClientFor(cfg)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := hc.Get(srv.URL)
			if err != nil {
				t.Fatalf("TLS with the kubeconfig: %v", err)
			}
			defer resp.Body.Close()
			var b bytes.Buffer
			_, _ = b.ReadFrom(resp.Body)
			if b.String() != "system:baremetal-ccm-agent:worker-1.rack2" {
				t.Errorf("server saw client %q", b.String())
			}
		})
	}

	// Defaults: standard output, --ca-cert as the bundle, a year.
	caCert, caKey := testCA(t, dir, "default", ecKey, sec1, true, year)
	var stdout, stderr bytes.Buffer
	if code := Run([]string{"agent", "kubeconfig", "--node", "w1", "--ca-cert", caCert, "--ca-key", caKey, "--server", "https://10.0.0.1:6443"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	kc, err := clientcmd.Load(stdout.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	caData, _ := os.ReadFile(caCert)
	cl := kc.Clusters[kc.Contexts[kc.CurrentContext].Cluster]
	if !bytes.Equal(cl.CertificateAuthorityData, caData) || cl.Server != "https://10.0.0.1:6443" {
		t.Errorf("cluster = %+v, want --ca-cert as the CA data", cl)
	}
	block, _ := pem.Decode(kc.AuthInfos[kc.Contexts[kc.CurrentContext].AuthInfo].ClientCertificateData)
	cert, _ := x509.ParseCertificate(block.Bytes)
	if d := time.Until(cert.NotAfter); d < 8759*time.Hour || d > 8760*time.Hour {
		t.Errorf("default validity %s, want a year", d)
	}
}

// TestAgentKubeconfigErrors: bad inputs exit 2 with an error naming the flag, and
// write nothing.
func TestAgentKubeconfigErrors(t *testing.T) {
	dir := t.TempDir()
	ecKey := mustEC(t)
	soon := time.Now().Add(24 * time.Hour)
	caCert, caKey := testCA(t, dir, "ca", ecKey, sec1, true, soon)
	_, otherKey := testCA(t, dir, "other", mustEC(t), pkcs8, true, soon)
	leafCert, _ := testCA(t, dir, "leaf", ecKey, sec1, false, soon)
	garbage := filepath.Join(dir, "garbage")
	_ = os.WriteFile(garbage, []byte("not pem\n"), 0o600)
	encrypted := filepath.Join(dir, "encrypted.key")
	_ = os.WriteFile(encrypted, pem.EncodeToMemory(&pem.Block{Type: "ENCRYPTED PRIVATE KEY", Bytes: []byte{1}}), 0o600)
	out := filepath.Join(dir, "out.kubeconfig")
	base := map[string]string{"--node": "w1", "--ca-cert": caCert, "--ca-key": caKey, "--server": "https://127.0.0.1:6443", "--validity": "1h", "--out": out}
	for _, c := range []struct {
		name   string
		set    map[string]string
		extra  []string
		stderr []string
	}{
		{"no node", map[string]string{"--node": ""}, nil, []string{"--node is required"}},
		{"bad node", map[string]string{"--node": "Worker_1"}, nil, []string{`--node "Worker_1"`, "RFC 1123"}},
		{"no server", map[string]string{"--server": ""}, nil, []string{"--server is required"}},
		{"http server", map[string]string{"--server": "http://127.0.0.1:6443"}, nil, []string{"--server", "https://HOST"}},
		{"no ca cert", map[string]string{"--ca-cert": ""}, nil, []string{"--ca-cert is required"}},
		{"missing ca cert", map[string]string{"--ca-cert": filepath.Join(dir, "nope")}, nil, []string{"--ca-cert", "no such file"}},
		{"no ca key", map[string]string{"--ca-key": ""}, nil, []string{"--ca-key is required"}},
		{"garbage ca cert", map[string]string{"--ca-cert": garbage}, nil, []string{"--ca-cert: no PEM certificate"}},
		{"not a CA", map[string]string{"--ca-cert": leafCert}, nil, []string{"--ca-cert", "not a CA"}},
		{"garbage key", map[string]string{"--ca-key": garbage}, nil, []string{"--ca-key: no PEM private key"}},
		{"encrypted key", map[string]string{"--ca-key": encrypted}, nil, []string{"--ca-key", "encrypted"}},
		{"mismatched key", map[string]string{"--ca-key": otherKey}, nil, []string{"--ca-key does not match --ca-cert"}},
		{"zero validity", map[string]string{"--validity": "0s"}, nil, []string{"--validity 0s: must be positive"}},
		{"outlives the CA", map[string]string{"--validity": "8760h"}, nil, []string{"--validity 8760h0m0s", "outlive the CA"}},
		{"bad bundle", map[string]string{"--ca-bundle": garbage}, nil, []string{"--ca-bundle: no PEM certificate"}},
		{"extra argument", nil, []string{"w2"}, []string{"unexpected arguments"}},
		{"several at once", map[string]string{"--node": "", "--server": "", "--ca-key": garbage}, nil, []string{"--node is required", "--server is required", "--ca-key: no PEM"}},
	} {
		args := []string{"agent", "kubeconfig"}
		for f, v := range base {
			if s, ok := c.set[f]; ok {
				v = s
			}
			args = append(args, f+"="+v)
		}
		for f, v := range c.set {
			if _, ok := base[f]; !ok {
				args = append(args, f+"="+v)
			}
		}
		args = append(args, c.extra...)
		var stdout, stderr bytes.Buffer
		if code := Run(args, &stdout, &stderr); code != 2 {
			t.Errorf("%s: exit %d, want 2", c.name, code)
		}
		for _, want := range c.stderr {
			if !strings.Contains(stderr.String(), want) {
				t.Errorf("%s: stderr %q lacks %q", c.name, stderr.String(), want)
			}
		}
		if _, err := os.Stat(out); stdout.Len() > 0 || err == nil {
			t.Errorf("%s: wrote a kubeconfig", c.name)
		}
	}
}
