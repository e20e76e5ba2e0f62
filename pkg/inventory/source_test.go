package inventory

import (
	"context"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
)

func TestFileSource(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "inventory.yaml")
	src := &FileSource{Path: p, Every: time.Second}
	ctx := context.Background()

	if _, _, err := src.Fetch(ctx); !errors.Is(err, ErrFetch) || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Fetch(missing) = %v, want ErrFetch wrapping ErrNotExist", err)
	}
	if err := os.WriteFile(p, []byte("one"), 0o600); err != nil {
		t.Fatal(err)
	}
	data, unchanged, err := src.Fetch(ctx)
	if err != nil || unchanged || string(data) != "one" {
		t.Fatalf("first Fetch = %q, %v, %v", data, unchanged, err)
	}
	if _, unchanged, _ := src.Fetch(ctx); !unchanged {
		t.Fatal("same content not reported unchanged")
	}
	// An atomic replace through rename, as editors and ConfigMap updates do.
	tmp := filepath.Join(dir, "tmp")
	_ = os.WriteFile(tmp, []byte("two"), 0o600)
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
	if data, unchanged, _ := src.Fetch(ctx); unchanged || string(data) != "two" {
		t.Fatalf("after rename: %q unchanged=%v", data, unchanged)
	}
}

func httpSource(t *testing.T, c config.HTTPSource) *HTTPSource {
	t.Helper()
	if c.Timeout == nil {
		c.Timeout = &metav1.Duration{Duration: 2 * time.Second}
	}
	if c.PollInterval == nil {
		c.PollInterval = &metav1.Duration{Duration: time.Second}
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = 1 << 20
	}
	s, err := NewHTTPSource(&c)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestHTTPSourceETagAndTLS(t *testing.T) {
	body := hostsDoc(0, 2)
	var requests, conditional atomic.Int32
	tokenFile := filepath.Join(t.TempDir(), "token")
	_ = os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		if r.Header.Get("Authorization") != "Bearer s3cret" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		if r.Header.Get("If-None-Match") == `"v1"` {
			conditional.Add(1)
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("ETag", `"v1"`)
		_, _ = w.Write([]byte(body))
	}))
	defer srv.Close()
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	_ = os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600)

	src := httpSource(t, config.HTTPSource{URL: srv.URL + "/inventory?token=abc", CAFile: caFile, BearerTokenFile: tokenFile})
	ctx := context.Background()
	data, unchanged, err := src.Fetch(ctx)
	if err != nil || unchanged || string(data) != body {
		t.Fatalf("first Fetch = %v, %v", unchanged, err)
	}
	if _, unchanged, err := src.Fetch(ctx); err != nil || !unchanged {
		t.Fatalf("second Fetch = unchanged %v, %v; want a 304", unchanged, err)
	}
	if conditional.Load() != 1 {
		t.Errorf("conditional requests = %d", conditional.Load())
	}
	if strings.Contains(src.String(), "token=abc") {
		t.Errorf("String() leaks the query: %s", src)
	}

	// Without the CA the certificate is not trusted.
	untrusted := httpSource(t, config.HTTPSource{URL: srv.URL, BearerTokenFile: tokenFile})
	if _, _, err := untrusted.Fetch(ctx); !errors.Is(err, ErrFetch) || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("Fetch without CA = %v, want a certificate error", err)
	}
	// insecureSkipVerify is an explicit opt-in that works.
	insecure := httpSource(t, config.HTTPSource{URL: srv.URL, BearerTokenFile: tokenFile, InsecureSkipVerify: true})
	if _, _, err := insecure.Fetch(ctx); err != nil {
		t.Fatalf("Fetch with insecureSkipVerify = %v", err)
	}
	// A wrong token is an HTTP error naming the status.
	_ = os.WriteFile(tokenFile, []byte("wrong"), 0o600)
	src.Forget()
	if _, _, err := src.Fetch(ctx); !errors.Is(err, ErrFetch) || !strings.Contains(err.Error(), "401") {
		t.Fatalf("Fetch with a wrong token = %v", err)
	}
}

func TestHTTPSourceErrors(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/500":
			http.Error(w, "database is down", http.StatusInternalServerError)
		case "/big":
			_, _ = w.Write([]byte(strings.Repeat("x", 2048)))
		case "/hang":
			select {
			case <-block:
			case <-r.Context().Done():
			}
		}
	}))
	defer srv.Close()
	ctx := context.Background()

	_, _, err := httpSource(t, config.HTTPSource{URL: srv.URL + "/500"}).Fetch(ctx)
	if !errors.Is(err, ErrFetch) || !strings.Contains(err.Error(), "500") || !strings.Contains(err.Error(), "database is down") {
		t.Errorf("500: %v", err)
	}
	_, _, err = httpSource(t, config.HTTPSource{URL: srv.URL + "/big", MaxBodyBytes: 1024}).Fetch(ctx)
	if !errors.Is(err, ErrFetch) || !strings.Contains(err.Error(), "maxBodyBytes") {
		t.Errorf("big: %v", err)
	}
	_, _, err = httpSource(t, config.HTTPSource{URL: srv.URL + "/hang", Timeout: &metav1.Duration{Duration: 100 * time.Millisecond}}).Fetch(ctx)
	if !errors.Is(err, ErrFetch) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("hang: %v, want a deadline error", err)
	}
}

func TestNewHTTPSourceBadCA(t *testing.T) {
	ca := filepath.Join(t.TempDir(), "ca.pem")
	_ = os.WriteFile(ca, []byte("not a pem"), 0o600)
	_, err := NewHTTPSource(&config.HTTPSource{URL: "https://x", CAFile: ca,
		Timeout: &metav1.Duration{Duration: time.Second}, PollInterval: &metav1.Duration{Duration: time.Second}})
	if err == nil || !strings.Contains(err.Error(), "caFile") {
		t.Fatalf("NewHTTPSource(bad CA) = %v", err)
	}
}
