package redfish

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net/http"
	"strings"
	"testing"
)

func TestTLSVerifiesWithCA(t *testing.T) {
	b := startBMC(t, Options{})
	if !strings.HasPrefix(b.URL(), "https://127.0.0.1:") {
		t.Fatalf("URL %q", b.URL())
	}
	blk, _ := pem.Decode(b.CAPEM())
	if blk == nil || blk.Type != "CERTIFICATE" {
		t.Fatalf("CAPEM: %q", b.CAPEM())
	}
	ca, err := x509.ParseCertificate(blk.Bytes)
	if err != nil || !ca.Equal(b.CA()) || !ca.IsCA {
		t.Fatalf("CAPEM does not hold CA(): %v", err)
	}

	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b.CAPEM()) {
		t.Fatal("AppendCertsFromPEM failed")
	}
	for _, host := range []string{"127.0.0.1", "localhost"} {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
		c := &http.Client{Transport: tr}
		url := "https://" + host + ":" + b.Port() + "/redfish/v1/"
		resp, _, err := doCtx(context.Background(), c, url, http.MethodGet, nil)
		tr.CloseIdleConnections()
		if err != nil {
			t.Fatalf("GET %s with the CA: %v", url, err)
		}
		if resp.StatusCode != http.StatusOK || resp.TLS == nil || resp.TLS.VerifiedChains == nil {
			t.Fatalf("GET %s: %d, TLS %+v", url, resp.StatusCode, resp.TLS)
		}
	}
}

func TestTLSRejectsWithoutCA(t *testing.T) {
	b := startBMC(t, Options{})
	other, err := NewCA()
	if err != nil {
		t.Fatal(err)
	}
	for name, roots := range map[string]*x509.CertPool{"system roots": nil, "another CA": other.Pool()} {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}
		_, _, err := doCtx(context.Background(), &http.Client{Transport: tr}, b.URL()+"/redfish/v1/", http.MethodGet, nil)
		tr.CloseIdleConnections()
		var verr *tls.CertificateVerificationError
		if !errors.As(err, &verr) {
			t.Errorf("%s: err = %v, want a certificate verification error", name, err)
		}
	}
	if n := b.RequestCount(http.MethodGet, "/redfish/v1"); n != 0 {
		t.Fatalf("%d requests got through an unverified TLS handshake", n)
	}
}

func TestSharedCA(t *testing.T) {
	ca, err := NewCA()
	if err != nil {
		t.Fatal(err)
	}
	b1 := startBMC(t, Options{CA: ca})
	b2 := startBMC(t, Options{CA: ca})
	if !b1.CA().Equal(ca.Certificate()) || !b2.CA().Equal(ca.Certificate()) {
		t.Fatal("BMCs do not report the shared CA")
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	for _, b := range []*BMC{b1, b2} {
		if resp, _ := do(t, c, b, http.MethodGet, "/redfish/v1/", nil); resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d", b.URL(), resp.StatusCode)
		}
	}
}

func TestPlainHTTP(t *testing.T) {
	b := startBMC(t, Options{PlainHTTP: true})
	if !strings.HasPrefix(b.URL(), "http://127.0.0.1:") || b.CA() != nil || b.CAPEM() != nil || b.CertPool() != nil {
		t.Fatalf("URL %q CA %v", b.URL(), b.CA())
	}
	c := client(t, b)
	if got := powerState(t, c, b); got != PowerOn {
		t.Fatalf("power %s", got)
	}
}
