package bmc

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/inventory"
)

// HTTPError is a Redfish request the BMC answered with an error status. Errors of
// this package wrap it (beside ErrAuth or ErrUnknownState), so callers can tell what
// answered and how with errors.As.
type HTTPError struct {
	Method, Path string
	Status       int
	// MessageID is the Redfish error's code or first MessageId, when the body had one.
	MessageID string
}

func (e *HTTPError) Error() string {
	s := fmt.Sprintf("%s %s: %d %s", e.Method, e.Path, e.Status, http.StatusText(e.Status))
	if e.MessageID != "" {
		s += " (" + e.MessageID + ")"
	}
	return s
}

// maxBody bounds what is read of one Redfish answer.
const maxBody = 4 << 20

// redfishConn is one Redfish service this process reads power from, over a kept
// session (X-Auth-Token) or, on a service without a SessionService, HTTP Basic auth.
// It decodes only the properties it needs (links, Id, Name, UUID, PowerState), each on
// its own, so no other property of any schema version can make a read fail. Every
// request carries its caller's context (and so its deadline). It is not safe for
// concurrent use (Sessions serializes the calls per BMC).
type redfishConn struct {
	base  string // scheme://host:port
	http  *http.Client
	creds Credentials

	basic      bool   // no SessionService: Basic auth on every request
	token      string // X-Auth-Token of the session ("" with basic or before login)
	sessionURI string // to DELETE at logout

	systems string // the Systems collection's URI
	// track, when set, is told every request before it is sent ("GET /path"), so a
	// call abandoned at its deadline can name the request under way.
	track func(string)
	// chosen is each host's ComputerSystem on this service (several hosts share a
	// blade enclosure's BMC), by Target.Host.
	chosen map[string]choice
}

// choice is a host's chosen ComputerSystem and the Target's System and SystemUUID
// it was chosen for.
type choice struct{ uri, want string }

// RedfishEndpoint returns the scheme://host:port a Redfish target is read at, as the
// CCM computes it (an address's own port, overridden by the inventory's port field).
func RedfishEndpoint(t Target) (string, error) {
	host, port, err := redfishEndpoint(t.Address, t.Port)
	if err != nil {
		return "", err
	}
	scheme := "https"
	if h, ok := strings.CutPrefix(host, "http://"); ok {
		scheme, host = "http", h
	}
	return scheme + "://" + net.JoinHostPort(host, port), nil
}

// newRedfishConn prepares a connection to t's service; nothing is sent yet.
func newRedfishConn(t Target, creds Credentials) (*redfishConn, error) {
	base, err := RedfishEndpoint(t)
	if err != nil {
		return nil, err
	}
	tlsConfig := &tls.Config{InsecureSkipVerify: t.InsecureSkipVerify} //nolint:gosec // an explicit per-host opt-in
	if !t.InsecureSkipVerify {
		if tlsConfig.RootCAs, err = rootCAs(t.CAFile); err != nil {
			return nil, err
		}
	}
	transport := &http.Transport{
		TLSClientConfig: tlsConfig, Proxy: nil, TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConnsPerHost: 1, IdleConnTimeout: 30 * time.Second,
	}
	client := &http.Client{Transport: transport,
		// Never follow a redirect: it could send the credentials (the login body, the
		// session token, Basic auth) to another host or over plain HTTP.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &redfishConn{base: base, http: client, creds: creds}, nil
}

// do sends one request to ref (a path, or a link the BMC sent: see resolve) and
// decodes a JSON answer into out (nil: none expected). A status >= 400 is an
// *HTTPError; a transport failure is ErrUnreachable, and one at the call's deadline
// names the request and the limit.
func (c *redfishConn) do(ctx context.Context, method, ref string, body any, out any) (*http.Response, error) {
	resp, data, err := c.send(ctx, method, ref, body, false)
	if err != nil || out == nil {
		return resp, err
	}
	if err := json.Unmarshal(data, out); err != nil {
		return resp, fmt.Errorf("%w: the BMC answered %s %s with %d, but not with a JSON object: %w", ErrUnknownState, method, ref, resp.StatusCode, err)
	}
	return resp, nil
}

// send sends one request and returns the answer's body (at most maxBody bytes: a
// longer one is an ErrUnknownState error). basic sends HTTP Basic auth instead of the
// session's token.
func (c *redfishConn) send(ctx context.Context, method, ref string, body any, basic bool) (*http.Response, []byte, error) {
	path, err := c.resolve(ref)
	if err != nil {
		return nil, nil, err
	}
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return nil, nil, err
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		// The path came from the BMC (a link it sent): it answered, but unusably.
		return nil, nil, fmt.Errorf("%w: the BMC sent a link that is not a valid path %q: %w", ErrUnknownState, path, err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("OData-Version", "4.0")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	switch {
	case basic || (c.basic && c.token == ""):
		req.SetBasicAuth(c.creds.Username, c.creds.Password)
	case c.token != "":
		req.Header.Set("X-Auth-Token", c.token)
	}
	if c.track != nil {
		c.track(method + " " + path)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, fmt.Errorf("%w: %s %s: %s: %w", ErrUnreachable, method, path, noAnswerWithin(ctx), ctx.Err())
		}
		return nil, nil, fmt.Errorf("%w: %s %s: %w", ErrUnreachable, method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, fmt.Errorf("%w: %s %s: reading the answer: %s: %w", ErrUnreachable, method, path, noAnswerWithin(ctx), ctx.Err())
		}
		return nil, nil, fmt.Errorf("%w: %s %s: reading the answer: %w", ErrUnreachable, method, path, err)
	}
	if len(data) > maxBody {
		return resp, nil, fmt.Errorf("%w: the BMC answered %s %s with %d and a body larger than %d MiB, more than any Redfish resource needs", ErrUnknownState, method, path, resp.StatusCode, maxBody>>20)
	}
	if resp.StatusCode >= 300 {
		he := &HTTPError{Method: method, Path: path, Status: resp.StatusCode, MessageID: messageID(data)}
		if refused(resp.StatusCode) {
			return resp, data, fmt.Errorf("%w: %w", ErrAuth, he)
		}
		return resp, data, fmt.Errorf("%w: the BMC answered %w", ErrUnknownState, he)
	}
	return resp, data, nil
}

// resolve turns a reference into the path (with query) of a request to this BMC. A
// reference is a path the client chose or a link the BMC sent (an @odata.id, a
// Location): an absolute path ("/redfish/v1/Systems/1"), or an absolute URL with the
// BMC's own scheme, host and port. Anything else — another host, a userinfo or
// network-path trick ("@host/...", "//host/..."), another scheme or port, a relative
// path — is an ErrUnknownState error and nothing is sent: the credentials (a login's
// password, a token, Basic auth) never leave the BMC.
func (c *redfishConn) resolve(ref string) (string, error) {
	u, err := url.Parse(ref)
	if err != nil {
		return "", fmt.Errorf("%w: the BMC sent a link %q that is not on the BMC (not a valid absolute path): not followed", ErrUnknownState, oneLine(ref))
	}
	if u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" {
		base, _ := url.Parse(c.base)
		if u.User != nil || u.Opaque != "" || !strings.EqualFold(u.Scheme, base.Scheme) || !sameHostPort(u, base) {
			return "", fmt.Errorf("%w: the BMC sent a link %q that is not on the BMC (%s): not followed", ErrUnknownState, oneLine(ref), c.base)
		}
	} else if !strings.HasPrefix(u.Path, "/") {
		return "", fmt.Errorf("%w: the BMC sent a link %q that is not on the BMC (not an absolute path): not followed", ErrUnknownState, oneLine(ref))
	}
	if u.Path == "" {
		u.Path = "/"
	}
	return (&url.URL{Path: u.Path, RawPath: u.RawPath, RawQuery: u.RawQuery}).RequestURI(), nil
}

// sameHostPort compares hosts (case-insensitive) and ports (the scheme's default
// when absent).
func sameHostPort(a, b *url.URL) bool {
	port := func(u *url.URL) string {
		if p := u.Port(); p != "" {
			return p
		}
		if strings.EqualFold(u.Scheme, "http") {
			return "80"
		}
		return "443"
	}
	return strings.EqualFold(a.Hostname(), b.Hostname()) && port(a) == port(b)
}

// callLimitKey carries a call's time limit, for messages.
type callLimitKey struct{}

// WithCallLimit records d as the time limit of the call ctx bounds, so that a
// timeout names it ("no answer within 10s"). Service sets it on every call; callers
// of a Driver directly (baremetal-ccmctl) set it with their own deadline.
func WithCallLimit(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, callLimitKey{}, d)
}

// noAnswerWithin says "no answer within <limit>": the limit WithCallLimit recorded, else
// the time from now to ctx's deadline.
func noAnswerWithin(ctx context.Context) string {
	if d, ok := ctx.Value(callLimitKey{}).(time.Duration); ok {
		return "no answer within " + d.String()
	}
	return "no answer within the call's deadline"
}

// messageID returns a Redfish error body's code (or first MessageId).
func messageID(data []byte) string {
	var e struct {
		Error struct {
			Code string `json:"code"`
			Ext  []struct {
				MessageID string `json:"MessageId"`
			} `json:"@Message.ExtendedInfo"`
		} `json:"error"`
	}
	if json.Unmarshal(data, &e) != nil {
		return ""
	}
	if e.Error.Code != "" {
		return e.Error.Code
	}
	if len(e.Error.Ext) > 0 {
		return e.Error.Ext[0].MessageID
	}
	return ""
}

// resource is a Redfish resource decoded property by property.
type resource map[string]json.RawMessage

// str returns a string property ("" when absent or not a string).
func (r resource) str(name string) string {
	var s string
	if raw, ok := r[name]; ok && json.Unmarshal(raw, &s) == nil {
		return s
	}
	return ""
}

// link returns the @odata.id of an object property ("" when absent).
func (r resource) link(name string) string {
	var l struct {
		ID string `json:"@odata.id"`
	}
	if raw, ok := r[name]; ok && json.Unmarshal(raw, &l) == nil {
		return l.ID
	}
	return ""
}

// members returns a collection's member URIs.
func (r resource) members() []string {
	var ms []struct {
		ID string `json:"@odata.id"`
	}
	var out []string
	if raw, ok := r["Members"]; ok && json.Unmarshal(raw, &ms) == nil {
		for _, m := range ms {
			if m.ID != "" {
				out = append(out, m.ID)
			}
		}
	}
	return out
}

// login discovers the service (unauthenticated GET of the service root) and opens a
// session; a service without a SessionService is read with Basic auth instead.
func (c *redfishConn) login(ctx context.Context) error {
	var root resource
	if _, err := c.do(ctx, http.MethodGet, "/redfish/v1/", nil, &root); err != nil {
		return err
	}
	c.systems = root.link("Systems")
	if c.systems == "" {
		c.systems = "/redfish/v1/Systems"
	}
	sessions := ""
	var links resource
	if raw, ok := root["Links"]; ok && json.Unmarshal(raw, &links) == nil {
		sessions = links.link("Sessions")
	}
	if sessions == "" && root.link("SessionService") != "" {
		sessions = "/redfish/v1/SessionService/Sessions"
	}
	if sessions == "" {
		c.basic = true // no SessionService: Basic auth on every request
		return nil
	}
	resp, data, err := c.send(ctx, http.MethodPost, sessions, map[string]string{"UserName": c.creds.Username, "Password": c.creds.Password}, false)
	if err != nil {
		var he *HTTPError
		if errors.As(err, &he) && (he.Status == http.StatusNotFound || he.Status == http.StatusMethodNotAllowed) {
			c.basic = true // it links a SessionService but cannot create sessions
			return nil
		}
		return err
	}
	uri, uriErr := c.sessionURIOf(resp, data, sessions)
	token := resp.Header.Get("X-Auth-Token")
	if token == "" {
		// A session without a token cannot be used, but it takes a place in the
		// BMC's session table: delete it with Basic auth, now.
		if uriErr != nil {
			return fmt.Errorf("%w: the BMC created a session (POST %s) but sent no X-Auth-Token, and it cannot be deleted: %w", ErrUnknownState, sessions, uriErr)
		}
		_, _, derr := c.send(ctx, http.MethodDelete, uri, nil, true)
		if derr != nil && !gone(derr) {
			return fmt.Errorf("%w: the BMC created a session (POST %s) but sent no X-Auth-Token; deleting it failed: %w", ErrUnknownState, sessions, derr)
		}
		return fmt.Errorf("%w: the BMC created a session (POST %s) but sent no X-Auth-Token (the session was deleted)", ErrUnknownState, sessions)
	}
	c.token = token
	if uriErr != nil {
		// A token without a session to delete: use it for this read (it cannot be
		// logged out, so it must not be kept either; the BMC expires it).
		return fmt.Errorf("%w: the BMC created a session (POST %s) but named it nowhere, so it could not be logged out: %w", ErrUnknownState, sessions, uriErr)
	}
	c.sessionURI = uri
	return nil
}

// sessionURIOf returns the path of the session a login created: its Location
// header, else the @odata.id of the session in the body, else the collection's
// path and the body's Id (DSP0266 requires the first two; services differ). Each is
// resolved on the BMC (a session "elsewhere" is not deleted there).
func (c *redfishConn) sessionURIOf(resp *http.Response, data []byte, sessions string) (string, error) {
	var body resource
	_ = json.Unmarshal(data, &body)
	var refs []string
	if loc := resp.Header.Get("Location"); loc != "" {
		refs = append(refs, loc)
	}
	if id := body.str("@odata.id"); id != "" {
		refs = append(refs, id)
	}
	if id := body.str("Id"); id != "" && !strings.Contains(id, "/") {
		if base, err := c.resolve(sessions); err == nil {
			refs = append(refs, strings.TrimSuffix(base, "/")+"/"+url.PathEscape(id))
		}
	}
	var firstErr error
	for _, ref := range refs {
		p, err := c.resolve(ref)
		if err == nil {
			return p, nil
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	if firstErr == nil {
		firstErr = errors.New("no Location header, and no @odata.id or Id in the body")
	}
	return "", firstErr
}

// gone reports whether a DELETE's error means the session no longer exists.
func gone(err error) bool {
	var he *HTTPError
	return errors.As(err, &he) && he.Status == http.StatusNotFound
}

// logout ends the session and forgets it. Its error says whether the BMC took the
// DELETE (a session it no longer knows — 404, or 401/403 for its token — counts as
// ended). With basicFallback, a DELETE refused for the token is sent again with
// Basic auth: for a session the BMC refuses the token of although it exists (a 401
// right after the login).
func (c *redfishConn) logout(ctx context.Context, basicFallback bool) error {
	var err error
	if c.token != "" && c.sessionURI != "" {
		_, err = c.do(ctx, http.MethodDelete, c.sessionURI, nil, nil)
		if basicFallback && errors.Is(err, ErrAuth) {
			_, _, err = c.send(ctx, http.MethodDelete, c.sessionURI, nil, true)
		}
		var he *HTTPError
		if errors.As(err, &he) && (he.Status == http.StatusNotFound || refused(he.Status)) {
			err = nil // the BMC no longer knows the session (expired, rebooted)
		}
	}
	c.token, c.sessionURI = "", ""
	c.http.CloseIdleConnections()
	return err
}

// systemInfo is what is read of one ComputerSystem.
type systemInfo struct {
	uri, id, name, uuid string
	power               string
	hasPower            bool
}

func (c *redfishConn) getSystem(ctx context.Context, uri string) (systemInfo, error) {
	var r resource
	if _, err := c.do(ctx, http.MethodGet, uri, nil, &r); err != nil {
		return systemInfo{}, err
	}
	s := systemInfo{uri: uri, id: r.str("Id"), name: r.str("Name"), uuid: canonicalUUID(r.str("UUID")), power: r.str("PowerState")}
	_, s.hasPower = r["PowerState"]
	return s, nil
}

// readSystem returns the raw power state and the system UUID of t's ComputerSystem,
// choosing it on the first read (and again when t names another, or it vanished):
// t.System by Id or path; else the only system; else the one whose UUID is
// t.SystemUUID. Anything else is an ErrUnknownState error that names the systems
// found and what to set.
func (c *redfishConn) readSystem(ctx context.Context, t Target) (string, string, error) {
	want := t.System + "\x00" + t.SystemUUID
	ch, ok := c.chosen[t.Host]
	if !ok || ch.want != want {
		uri, err := c.choose(ctx, t)
		if err != nil {
			return "", "", err
		}
		if c.chosen == nil {
			c.chosen = map[string]choice{}
		}
		ch = choice{uri: uri, want: want}
		c.chosen[t.Host] = ch
	}
	s, err := c.getSystem(ctx, ch.uri)
	var he *HTTPError
	if errors.As(err, &he) && he.Status == http.StatusNotFound {
		delete(c.chosen, t.Host) // renumbered (a recomposed system): chosen anew next time
	}
	if err != nil {
		return "", "", err
	}
	if !s.hasPower || s.power == "" {
		return "", s.uuid, fmt.Errorf("%w: the BMC answered, but ComputerSystem %s reports no PowerState", ErrUnknownState, s.uri)
	}
	return s.power, s.uuid, nil
}

func (c *redfishConn) choose(ctx context.Context, t Target) (string, error) {
	if sys := t.System; sys != "" {
		uri := sys
		if !strings.HasPrefix(sys, "/") {
			uri = strings.TrimSuffix(c.systems, "/") + "/" + sys
		}
		if _, err := c.getSystem(ctx, uri); err != nil {
			var he *HTTPError
			if errors.As(err, &he) && he.Status == http.StatusNotFound {
				all, lerr := c.listSystems(ctx)
				has := describe(all)
				if lerr != nil {
					has = "systems that could not be listed (" + lerr.Error() + ")"
				}
				return "", fmt.Errorf("%w: the BMC answered, but has no ComputerSystem %s (bmc.system %q); it has %s: set bmc.system to one of them",
					ErrUnknownState, uri, sys, has)
			}
			return "", err
		}
		return uri, nil
	}
	all, err := c.listSystems(ctx)
	if err != nil {
		return "", err
	}
	switch {
	case len(all) == 0:
		return "", fmt.Errorf("%w: the BMC answered, but %s lists no ComputerSystem", ErrUnknownState, c.systems)
	case len(all) == 1:
		return all[0].uri, nil
	}
	if t.SystemUUID != "" {
		var match []systemInfo
		for _, s := range all {
			if same, ok := inventory.SameSystemUUID(s.uuid, t.SystemUUID); ok && same {
				match = append(match, s)
			}
		}
		if len(match) == 1 {
			return match[0].uri, nil
		}
		return "", fmt.Errorf("%w: the BMC answered; it has %d systems (%s) and %d have the host's systemUUID %s: set bmc.system to the host's Id",
			ErrUnknownState, len(all), describe(all), len(match), t.SystemUUID)
	}
	return "", fmt.Errorf("%w: the BMC answered; it has %d systems (%s) and the host names none: set bmc.system to the host's Id, or the host's systemUUID",
		ErrUnknownState, len(all), describe(all))
}

// listSystems reads every member of the Systems collection.
func (c *redfishConn) listSystems(ctx context.Context) ([]systemInfo, error) {
	var col resource
	if _, err := c.do(ctx, http.MethodGet, c.systems, nil, &col); err != nil {
		return nil, err
	}
	uris := col.members()
	out := make([]systemInfo, len(uris))
	errs := make([]error, len(uris))
	sem := make(chan struct{}, maxParallelGets)
	var wg sync.WaitGroup
	for i, uri := range uris {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			out[i], errs[i] = c.getSystem(ctx, uri)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err // the first: errors stay one line
		}
	}
	return out, nil
}

// maxParallelGets bounds the concurrent GETs of one service's systems (a blade
// enclosure lists 16 or more).
const maxParallelGets = 8

// describe names systems for a message: Id, Name and UUID of each.
func describe(all []systemInfo) string {
	if len(all) == 0 {
		return "no systems"
	}
	var parts []string
	for _, s := range all {
		p := s.id
		if p == "" {
			p = s.uri
		}
		if s.name != "" {
			p += " " + fmt.Sprintf("%q", s.name)
		}
		if s.uuid != "" {
			p += " UUID " + s.uuid
		}
		parts = append(parts, p)
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}
