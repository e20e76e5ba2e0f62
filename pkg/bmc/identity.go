package bmc

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/stmcginnis/gofish"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/inventory"
)

// IdentityReader is implemented by a Driver that can also say which machine answered:
// ReadPower returns the raw power state and the system UUID the BMC reports for the
// system it read it from ("" when the BMC reports none). Service uses it when the
// Driver has it, and puts the UUID in Reading.SystemUUID.
type IdentityReader interface {
	ReadPower(ctx context.Context, t Target) (raw, systemUUID string, err error)
}

// identityTTL is how long a BMC's system UUID (or its answer that it reports none) is
// reused, keyed by address, port, TLS settings and credentials: a BMC's machine does
// not change under them, and a changed inventory entry or credential is read anew.
const identityTTL = 10 * time.Minute

// ReadPower implements IdentityReader. The power state is read as by PowerState (on
// the kept session). Only an "off" answer — the one anything acts on — also needs the
// machine's identity, read at most once per identityTTL for one address and
// credentials, so hosts that are on cost nothing extra:
//   - Redfish: the ComputerSystem's UUID, on a short session of its own (login, GET
//     Systems and its member, logout). A BMC with several systems reports no UUID here
//     (which system is the host's is another question).
//   - IPMI: the system GUID (Get System GUID, "ipmitool raw 0x06 0x37"); a BMC that
//     does not implement the command reports none.
//
// An off host whose identity cannot be read is an ErrUnknownState error, never an
// unverified "off".
func (s *Sessions) ReadPower(ctx context.Context, t Target) (string, string, error) {
	raw, err := s.PowerState(ctx, t)
	if err != nil || Normalize(raw) != PowerOff {
		return raw, "", err
	}
	creds, err := credentialsOf(ctx, s.creds, t)
	if err != nil {
		return "", "", fmt.Errorf("%w: the BMC reports the host off, but its system's identity could not be read: %w", ErrUnknownState, err)
	}
	uuid, err := s.ids.get(ctx, fingerprint(t, creds), func(ctx context.Context) (string, error) {
		switch t.Protocol {
		case inventory.ProtocolRedfish:
			return redfishSystemUUID(ctx, t, creds)
		case inventory.ProtocolIPMI:
			return ipmiSystemGUID(ctx, t, creds)
		}
		return "", nil
	})
	if err != nil {
		return "", "", fmt.Errorf("%w: the BMC reports the host off, but its system's identity could not be read: %w", ErrUnknownState, err)
	}
	return raw, uuid, nil
}

// identities caches system UUIDs by target fingerprint.
type identities struct {
	mu   sync.Mutex
	byFP map[[32]byte]identity
}

type identity struct {
	uuid string
	at   time.Time
}

func (c *identities) get(ctx context.Context, fp [32]byte, read func(context.Context) (string, error)) (string, error) {
	c.mu.Lock()
	if id, ok := c.byFP[fp]; ok && time.Since(id.at) < identityTTL {
		c.mu.Unlock()
		return id.uuid, nil
	}
	c.mu.Unlock()
	uuid, err := read(ctx)
	if err != nil {
		return "", err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byFP == nil {
		c.byFP = map[[32]byte]identity{}
	}
	c.byFP[fp] = identity{uuid: uuid, at: time.Now()}
	return uuid, nil
}

// redfishSystemUUID logs in, reads the UUID of the service's only ComputerSystem, and
// logs out, all within ctx's deadline. "" when the service has several systems or the
// system reports no UUID.
func redfishSystemUUID(ctx context.Context, t Target, creds Credentials) (string, error) {
	host, port, err := redfishEndpoint(t.Address, t.Port)
	if err != nil {
		return "", err
	}
	scheme := "https"
	if h, ok := strings.CutPrefix(host, "http://"); ok {
		scheme, host = "http", h
	}
	tlsConfig := &tls.Config{InsecureSkipVerify: t.InsecureSkipVerify} //nolint:gosec // an explicit per-host opt-in
	if !t.InsecureSkipVerify {
		if tlsConfig.RootCAs, err = rootCAs(t.CAFile); err != nil {
			return "", err
		}
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig, Proxy: nil}}
	defer client.CloseIdleConnections()
	type result struct {
		uuid string
		err  error
	}
	done := make(chan result, 1)
	// gofish uses one context for every request, the logout included: give it a few
	// seconds beyond the caller's deadline, so a read that ends late still logs out
	// (the caller returns at its deadline regardless).
	gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), logoutGrace+remaining(ctx, 30*time.Second))
	go func() {
		defer cancel()
		c, err := gofish.ConnectContext(gctx, gofish.ClientConfig{
			Endpoint: scheme + "://" + net.JoinHostPort(host, port), Username: creds.Username, Password: creds.Password, HTTPClient: client,
		})
		if err != nil {
			done <- result{err: classify(err)}
			return
		}
		systems, err := c.Service.Systems()
		var r result
		switch {
		case err != nil:
			r.err = classify(err)
		case len(systems) == 0:
			r.err = errors.New("the Redfish service lists no ComputerSystem")
		case len(systems) == 1:
			r.uuid = canonicalUUID(systems[0].UUID)
		}
		c.Logout() // before answering: no session is left behind a returned call
		done <- r
	}()
	select {
	case r := <-done:
		return r.uuid, r.err
	case <-ctx.Done():
		return "", fmt.Errorf("%w: reading the system's identity: %w", ErrUnreachable, ctx.Err())
	}
}

// logoutGrace is how long a Redfish logout may run past the caller's deadline.
const logoutGrace = 5 * time.Second

// remaining is the time left until ctx's deadline, or def without one.
func remaining(ctx context.Context, def time.Duration) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		return max(time.Until(d), 0)
	}
	return def
}

// canonicalUUID lower-cases a UUID; anything that is not a UUID is "" (no evidence).
func canonicalUUID(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	if _, ok := inventory.SameSystemUUID(s, s); !ok {
		return ""
	}
	return s
}
