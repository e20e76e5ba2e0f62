package bmc

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	bmclib "github.com/bmc-toolbox/bmclib/v2"
	"github.com/stmcginnis/gofish/common"

	"github.com/baremetal-ccm/baremetal-ccm/internal/strictyaml"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/inventory"
)

// ErrCredentials: the credentials cannot be used (a file or Secret missing,
// unreadable, too open or malformed). Their content never appears in the error.
var ErrCredentials = errors.New("BMC credentials unusable")

// Credentials are a BMC's username and password.
type Credentials struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

// ReadCredentials reads a credentials file (YAML or JSON: `username: …` and
// `password: …`). It refuses a file that group or others can read, so a password is
// never left world-readable. Errors wrap ErrCredentials and name the file, never its
// content.
func ReadCredentials(path string) (Credentials, error) {
	var c Credentials
	fi, err := os.Stat(path)
	if err != nil {
		return c, fmt.Errorf("%w: %w", ErrCredentials, err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return c, fmt.Errorf("%w: %s is readable by group or others (mode %04o); run chmod 600 %s", ErrCredentials, path, perm, path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("%w: %w", ErrCredentials, err)
	}
	fieldErrs, err := strictyaml.Unmarshal(data, &c)
	if err != nil || len(fieldErrs) > 0 {
		// The decoder's messages could quote the content: say only what is expected.
		return Credentials{}, fmt.Errorf("%w: %s must hold exactly `username: <user>` and `password: <password>`", ErrCredentials, path)
	}
	if c.Username == "" || c.Password == "" {
		return Credentials{}, fmt.Errorf("%w: %s lacks username or password", ErrCredentials, path)
	}
	return c, nil
}

// BMCLib is the one-shot Driver over github.com/bmc-toolbox/bmclib/v2: Redfish through
// its gofish driver and IPMI through its ipmitool driver (the ipmitool binary must be on
// PATH). Every call opens one session, reads the power state and closes the session;
// exactly one bmclib driver is used per protocol, TLS is verified unless the host opts
// out, and the call returns at ctx's deadline even though bmclib itself does not honor
// it per request (an abandoned call ends at the same deadline inside bmclib). It suits
// one-off checks; the CCM runs Sessions, which keeps a Redfish session per BMC.
type BMCLib struct {
	// Credentials resolves credentials; nil reads the Target's credentials file.
	Credentials CredentialSource
}

var _ Driver = BMCLib{}

// TargetFor builds the Target of an inventory host; ok is false without a BMC. A
// Redfish host without a caFile of its own gets defaultCA (which may be empty: the
// system roots).
func TargetFor(h *inventory.Host, defaultCA string) (Target, bool) {
	if h.BMC == nil {
		return Target{}, false
	}
	b := h.BMC
	ca := b.CAFile
	if ca == "" && b.Protocol == inventory.ProtocolRedfish {
		ca = defaultCA
	}
	t := Target{Host: h.Name, Protocol: b.Protocol, Address: b.Address, Port: b.Port,
		CredentialsFile: b.CredentialsFile, CAFile: ca, InsecureSkipVerify: b.InsecureSkipVerify,
		System: b.System, SystemUUID: h.SystemUUID}
	if s := b.CredentialsSecret; s != nil {
		t.SecretNamespace, t.SecretName = s.Namespace, s.Name
	}
	return t, true
}

// PowerState implements Driver.
func (d BMCLib) PowerState(ctx context.Context, t Target) (string, error) {
	creds, err := credentialsOf(ctx, d.Credentials, t)
	if err != nil {
		return "", err
	}
	client, err := newClient(t, creds)
	if err != nil {
		return "", err
	}
	type result struct {
		state string
		err   error
	}
	done := make(chan result, 1)
	go func() {
		if err := client.Open(ctx); err != nil {
			done <- result{err: classify(err)}
			return
		}
		state, err := client.GetPowerState(ctx)
		// Log out before answering, with its own short deadline: a session is never
		// left open behind a returned call (unless the call was abandoned at its
		// deadline, when the logout still runs here in the background).
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = client.Close(cctx)
		cancel()
		done <- result{state: state, err: classifyOrNil(err)}
	}()
	select {
	case r := <-done:
		return r.state, r.err
	case <-ctx.Done():
		return "", fmt.Errorf("%w: %w", ErrUnreachable, ctx.Err())
	}
}

func newClient(t Target, c Credentials) (*bmclib.Client, error) {
	switch t.Protocol {
	case inventory.ProtocolRedfish:
		host, port, err := redfishEndpoint(t.Address, t.Port)
		if err != nil {
			return nil, err
		}
		opts := []bmclib.Option{bmclib.WithRedfishPort(port)}
		if !t.InsecureSkipVerify {
			pool, err := rootCAs(t.CAFile)
			if err != nil {
				return nil, err
			}
			opts = append(opts, bmclib.WithSecureTLS(pool))
		}
		client := bmclib.NewClient(host, c.Username, c.Password, opts...)
		client.Registry.Drivers = client.Registry.For("gofish")
		return client, nil
	case inventory.ProtocolIPMI:
		port := "623"
		if t.Port != 0 {
			port = strconv.Itoa(int(t.Port))
		}
		client := bmclib.NewClient(t.Address, c.Username, c.Password,
			bmclib.WithIpmitoolPort(port), bmclib.WithIpmitoolCipherSuite("3"))
		client.Registry.Drivers = client.Registry.For("ipmitool")
		if len(client.Registry.Drivers) == 0 {
			return nil, fmt.Errorf("%w: the ipmitool driver is unavailable (is ipmitool installed and on PATH?)", ErrUnreachable)
		}
		return client, nil
	}
	return nil, fmt.Errorf("unsupported BMC protocol %q", t.Protocol)
}

// redfishEndpoint turns an inventory address ("10.1.0.5", "bmc.example",
// "https://10.1.0.5:8443", "http://10.1.0.5") into bmclib's host (bmclib adds https://
// unless the host starts with http://) and port.
func redfishEndpoint(addr string, port int32) (string, string, error) {
	host, scheme, p := addr, "https", ""
	if strings.Contains(addr, "://") {
		u, err := url.Parse(addr)
		if err != nil || u.Hostname() == "" {
			return "", "", fmt.Errorf("BMC address %q is not a valid URL", addr)
		}
		scheme, host, p = u.Scheme, u.Hostname(), u.Port()
	} else if h, pp, err := net.SplitHostPort(addr); err == nil {
		host, p = h, pp
	}
	if port != 0 {
		p = strconv.Itoa(int(port))
	}
	if p == "" {
		p = "443"
		if scheme == "http" {
			p = "80"
		}
	}
	if scheme == "http" {
		host = "http://" + host
	}
	return host, p, nil
}

func rootCAs(caFile string) (*x509.CertPool, error) {
	if caFile == "" {
		return nil, nil // bmclib uses the system roots
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("BMC CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("BMC CA file %s: no PEM certificate found", caFile)
	}
	return pool, nil
}

func classifyOrNil(err error) error {
	if err == nil {
		return nil
	}
	return classify(err)
}

// classify wraps a BMC error as ErrAuth when the BMC refused the credentials, and as
// ErrUnreachable otherwise (no usable answer). Redfish errors are classified by the
// HTTP status gofish reports (401 or 403: refused), never by matching the message, so a
// port like 14010 or a host named bmc-r401 is not mistaken for a refusal. The
// ipmitool driver reports only text: its RAKP and authentication failures (the words
// ipmitool prints for a refused user or password) are refusals.
func classify(err error) error {
	var rf *common.Error
	if errors.As(err, &rf) && rf.HTTPReturnedStatusCode != 0 {
		if refused(rf.HTTPReturnedStatusCode) {
			return fmt.Errorf("%w: %w", ErrAuth, err)
		}
		return fmt.Errorf("%w: %w", ErrUnreachable, err)
	}
	var ce *common.CollectionError
	if errors.As(err, &ce) {
		// gofish collects the errors of a collection's members without wrapping them.
		for _, m := range ce.Failures {
			if errors.As(m, &rf) && refused(rf.HTTPReturnedStatusCode) {
				return fmt.Errorf("%w: %w", ErrAuth, err)
			}
		}
		return fmt.Errorf("%w: %w", ErrUnreachable, err)
	}
	if errors.As(err, &rf) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		// gofish without a status: the request itself failed (connection, TLS, timeout).
		return fmt.Errorf("%w: %w", ErrUnreachable, err)
	}
	if ipmiAuthRE.MatchString(err.Error()) {
		return fmt.Errorf("%w: %w", ErrAuth, err)
	}
	return fmt.Errorf("%w: %w", ErrUnreachable, err)
}

// refused reports whether an HTTP status means the BMC refused the credentials or the
// session.
func refused(status int) bool {
	return status == http.StatusUnauthorized || status == http.StatusForbidden
}

// ipmiAuthRE matches what ipmitool prints when the BMC refuses the user or password.
// (Insufficient privilege, 0xD4, is not a refusal of the credentials: ipmitool
// reports it as ErrAccessDenied.)
var ipmiAuthRE = regexp.MustCompile(`(?i)\b(rakp \d|unauthorized name|invalid user name|incorrect password|invalid password|authentication type)`)
