package inventory

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
)

// ErrFetch is wrapped by every error a Source returns: the document could not be read.
var ErrFetch = errors.New("cannot fetch inventory")

// Source fetches the raw Inventory document.
type Source interface {
	// Fetch returns the document. unchanged is true when the source knows the document
	// is the same as the one last returned (data is then nil). It honors ctx's deadline.
	Fetch(ctx context.Context) (data []byte, unchanged bool, err error)
	// Interval is the time between fetches.
	Interval() time.Duration
	// String names the source for logs and events, without credentials.
	String() string
}

// NewSource builds the Source the CloudConfig selects.
func NewSource(c *config.InventoryConfig) (Source, error) {
	switch {
	case c.File != nil:
		return &FileSource{Path: c.File.Path, Every: c.File.PollInterval.Duration}, nil
	case c.HTTP != nil:
		return NewHTTPSource(c.HTTP)
	}
	return nil, errors.New("no inventory source configured")
}

// FileSource reads the document from a local file. It notices any change of content,
// including an atomic rename or a Kubernetes ConfigMap symlink swap.
type FileSource struct {
	Path  string
	Every time.Duration
	last  []byte
	mu    sync.Mutex
}

// Fetch implements Source.
func (f *FileSource) Fetch(ctx context.Context) ([]byte, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, false, fmt.Errorf("%w: %w", ErrFetch, err)
	}
	data, err := os.ReadFile(f.Path)
	if err != nil {
		return nil, false, fmt.Errorf("%w: %w", ErrFetch, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.last != nil && bytes.Equal(data, f.last) {
		return nil, true, nil
	}
	f.last = data
	return data, false, nil
}

// Interval implements Source.
func (f *FileSource) Interval() time.Duration { return f.Every }

func (f *FileSource) String() string { return "file " + f.Path }

// HTTPSource polls the document from an HTTP(S) URL with conditional GETs.
type HTTPSource struct {
	url       string
	redacted  string
	client    *http.Client
	timeout   time.Duration
	every     time.Duration
	maxBody   int64
	tokenFile string

	mu   sync.Mutex
	etag string
}

// NewHTTPSource builds an HTTPSource; it fails when a configured CA or client
// certificate cannot be loaded.
func NewHTTPSource(c *config.HTTPSource) (*HTTPSource, error) {
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: c.InsecureSkipVerify} //nolint:gosec // explicit opt-in
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("inventory.http.caFile: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("inventory.http.caFile %s: no PEM certificate found", c.CAFile)
		}
		tlsCfg.RootCAs = pool
	}
	if c.ClientCertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.ClientCertFile, c.ClientKeyFile)
		if err != nil {
			return nil, fmt.Errorf("inventory.http.clientCertFile/clientKeyFile: %w", err)
		}
		tlsCfg.Certificates = []tls.Certificate{cert}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tlsCfg
	tr.Proxy = http.ProxyFromEnvironment
	u, _ := url.Parse(c.URL)
	u.RawQuery = ""
	return &HTTPSource{
		url:       c.URL,
		redacted:  u.String(),
		client:    &http.Client{Transport: tr},
		timeout:   c.Timeout.Duration,
		every:     c.PollInterval.Duration,
		maxBody:   c.MaxBodyBytes,
		tokenFile: c.BearerTokenFile,
	}, nil
}

// Fetch implements Source: a GET bounded by the configured timeout, with If-None-Match
// when the previous answer carried an ETag.
func (h *HTTPSource) Fetch(ctx context.Context) ([]byte, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.url, nil)
	if err != nil {
		return nil, false, fmt.Errorf("%w: %w", ErrFetch, err)
	}
	req.Header.Set("Accept", "application/json, application/yaml;q=0.9, */*;q=0.1")
	h.mu.Lock()
	etag := h.etag
	h.mu.Unlock()
	if etag != "" {
		req.Header.Set("If-None-Match", etag)
	}
	if h.tokenFile != "" {
		tok, err := os.ReadFile(h.tokenFile)
		if err != nil {
			return nil, false, fmt.Errorf("%w: bearer token: %w", ErrFetch, err)
		}
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return nil, false, fmt.Errorf("%w: GET %s: %w", ErrFetch, h.redacted, redactURLError(err))
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotModified && etag != "":
		return nil, true, nil
	case resp.StatusCode != http.StatusOK:
		snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
		return nil, false, fmt.Errorf("%w: GET %s: HTTP %s: %q", ErrFetch, h.redacted, resp.Status, strings.TrimSpace(string(snippet)))
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, h.maxBody+1))
	if err != nil {
		return nil, false, fmt.Errorf("%w: GET %s: reading body: %w", ErrFetch, h.redacted, err)
	}
	if int64(len(data)) > h.maxBody {
		return nil, false, fmt.Errorf("%w: GET %s: body larger than inventory.http.maxBodyBytes (%d)", ErrFetch, h.redacted, h.maxBody)
	}
	h.mu.Lock()
	h.etag = resp.Header.Get("ETag")
	h.mu.Unlock()
	return data, false, nil
}

// Forget drops the remembered ETag so the next Fetch returns the full document.
func (h *HTTPSource) Forget() {
	h.mu.Lock()
	h.etag = ""
	h.mu.Unlock()
}

// Interval implements Source.
func (h *HTTPSource) Interval() time.Duration { return h.every }

func (h *HTTPSource) String() string { return "http " + h.redacted }

// redactURLError strips the URL (which may carry a query token) from a *url.Error.
func redactURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
