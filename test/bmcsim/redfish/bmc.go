package redfish

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Defaults for the zero Options.
const (
	DefaultUsername       = "admin"
	DefaultPassword       = "password"
	DefaultSystemID       = "1"
	DefaultManagerID      = "BMC"
	DefaultChassisID      = "1"
	DefaultMaxSessions    = 4
	DefaultRedfishVersion = "1.17.0"

	// DefaultLockoutDuration is Options.LockoutDuration's default.
	DefaultLockoutDuration = 10 * time.Minute
)

// Options configures a BMC. The zero value is a usable BMC: TLS on a random
// 127.0.0.1 port, user admin/password, one system "1" that is On, at most 4
// sessions, instant power transitions.
type Options struct {
	// Username and Password are the only valid credentials, for both Basic
	// auth and session login. Defaults: DefaultUsername, DefaultPassword.
	Username, Password string

	// Addr is the listen address. It must be a loopback IP (or "localhost")
	// with a port; the default "127.0.0.1:0" picks a random port.
	Addr string
	// PlainHTTP serves plain HTTP instead of TLS.
	PlainHTTP bool
	// CA issues the server certificate. Nil: the BMC generates its own CA.
	// Share one CA between BMCs so that clients trust a single certificate.
	CA *CA

	// SystemID, ManagerID and ChassisID name the single ComputerSystem,
	// Manager and Chassis (the last path segment of their URIs). Defaults:
	// DefaultSystemID, DefaultManagerID, DefaultChassisID.
	SystemID, ManagerID, ChassisID string
	// SystemName is the ComputerSystem's Name (bmclib's WithRedfishSystemName
	// matches it). Default "System".
	SystemName string
	// Manufacturer, Model and SerialNumber of the ComputerSystem. Defaults:
	// "Contoso", "Emulated Server", "SN" + the system UUID's first group
	// (each system's own; a SerialNumber set here is every system's).
	// bmclib's "dell" driver, registered for the "redfish" protocol like
	// "gofish", stays open only if Manufacturer contains "dell" (it always
	// dials port 443, ignoring WithRedfishPort).
	Manufacturer, Model, SerialNumber string
	// SystemUUID is the ComputerSystem's UUID; ServiceUUID the ServiceRoot's
	// (and the Manager's ServiceEntryPointUUID). Random when empty.
	SystemUUID, ServiceUUID string
	// RedfishVersion is the ServiceRoot's RedfishVersion. Default
	// DefaultRedfishVersion.
	RedfishVersion string

	// InitialPowerState is the host's power state at start: PowerOn (the
	// default) or PowerOff.
	InitialPowerState PowerState
	// TransitionDelay is how long the host stays in each of PoweringOn and
	// PoweringOff after a Reset. Zero: resets take effect at once.
	TransitionDelay time.Duration
	// AllowedResetTypes is ResetType@Redfish.AllowableValues; a Reset with
	// another type answers 400. Default AllResetTypes.
	AllowedResetTypes []ResetType
	// StrictReset makes a Reset that would change nothing (On when on,
	// ForceOff when off, a restart or NMI when off) answer 409 Conflict, as
	// iDRAC does. Default: such a Reset succeeds and does nothing.
	StrictReset bool
	// StrictETag makes Reset require a matching If-Match when the client
	// sends one: a stale ETag answers 412. The ComputerSystem always carries
	// an ETag that changes with its power state.
	StrictETag bool

	// MaxSessions is the session limit; a login beyond it answers
	// SessionLimitStatus. Zero means DefaultMaxSessions; negative, no limit.
	MaxSessions int
	// SessionLimitStatus is the HTTP status of a login refused for the
	// limit or SetSessionExhausted. Default 503, as iDRAC (RAC0218) answers.
	SessionLimitStatus int
	// SessionTimeout expires a session that has not been used for that long
	// (its token then answers 401). Zero: sessions never expire.
	SessionTimeout time.Duration
	// DisableBasicAuth refuses HTTP Basic auth (401), as some BMCs can be
	// configured to; only session tokens are then accepted.
	DisableBasicAuth bool

	// Systems puts several ComputerSystems behind the BMC, as a bladed or
	// partitioned service has, listed in this order in /redfish/v1/Systems.
	// It replaces SystemID, SystemName, SystemUUID and InitialPowerState
	// (setting any of them too panics); its first system is the one
	// SystemPath, PowerState and SetPowerState concern. Empty: one system
	// built from those four fields.
	Systems []SystemSpec
	// ModernSchema adds to every ComputerSystem properties of recent schema
	// versions (@odata.type ComputerSystem.v1_22_0): OperatingSystem (a link
	// to a served OperatingSystem resource), BootProgress and Composition
	// (objects) and PowerMode. Without it the ComputerSystem is unchanged.
	ModernSchema bool
	// NoSessionService makes a service without sessions: the ServiceRoot has
	// no SessionService and no Links.Sessions, the login POST answers 404,
	// and the SessionService and its Sessions answer 404 (401 first without
	// credentials, like any unknown path). Only Basic auth works, so it
	// cannot be combined with DisableBasicAuth (NewBMC panics).
	NoSessionService bool
	// LockoutAfter locks a client IP out, as iDRAC does after three, once
	// that many authentications with bad credentials (session login or
	// Basic) came from it, each less than LockoutDuration after the previous
	// one. While locked out, every authentication from that IP (right
	// password, session token) answers 401 without its credentials being
	// checked or counted; the lockout ends LockoutDuration after the last
	// failure, and the count with it. A success does not clear the count.
	// Zero: never.
	LockoutAfter int
	// LockoutDuration is the lockout's length and the window in which
	// failures add up. Default 10 minutes when LockoutAfter is set.
	LockoutDuration time.Duration
	// LoginOmitsToken makes a successful login create its session and answer
	// 201 with Location (and the session in the body) but without the
	// X-Auth-Token header DSP0266 requires: the client holds a session it
	// cannot use, and must still delete it (with Basic auth).
	LoginOmitsToken bool
	// LoginOmitsLocation makes a successful login answer without the Location
	// header DSP0266 requires; the body's @odata.id still names the session.
	LoginOmitsLocation bool
	// RootLinks replaces links of the ServiceRoot, by name ("Systems",
	// "SessionService", "Links.Sessions"), with the given @odata.id, served
	// verbatim: a cross-host link such as "@127.0.0.2:8443/redfish/v1/..." or
	// "//127.0.0.2:8443/...", or an absolute URL of another service. The
	// resources themselves stay where they are.
	RootLinks map[string]string

	// LoginDelay holds the answer to every successful login for that long
	// after the session was created (the session exists and counts during
	// the wait). A client that gives up, or Close, ends the wait with no
	// answer. Other requests are not delayed.
	LoginDelay time.Duration

	// ErrorLog receives the HTTP server's own errors (TLS handshake
	// failures, for example). Nil discards them.
	ErrorLog *log.Logger
}

// SystemSpec describes one ComputerSystem of Options.Systems.
type SystemSpec struct {
	// ID is the last segment of the system's URI, /redfish/v1/Systems/{ID}:
	// required, unique, without "/".
	ID string
	// Name is the system's Name; several systems may share one (DMTF's
	// bladed mockup names all its blades "Bladed System"). Default "System".
	Name string
	// UUID is the system's UUID. Random when empty.
	UUID string
	// InitialPowerState is PowerOn (the default) or PowerOff.
	InitialPowerState PowerState
	// OmitPowerState leaves PowerState out of the system's resource, as a
	// service that cannot report the system's power does. Resets still work
	// and SystemPowerState still reports the emulated state.
	OmitPowerState bool
}

// Request is one request as the BMC received it, before any fault injection.
type Request struct {
	Method string
	// Path is the URL path as sent (query excluded).
	Path string
	// Auth is the kind of credentials the request carried, valid or not:
	// "session" (X-Auth-Token), "basic" (Authorization: Basic) or "none".
	Auth string
}

// PowerRead is one answer of a ComputerSystem document: when (wall clock, this
// process) and which PowerState it reported.
type PowerRead struct {
	At     time.Time
	System string
	State  PowerState
}

// BMC is an emulated Redfish BMC managing one server, or several
// (Options.Systems). All its methods are safe for concurrent use. Create it
// with NewBMC, then Start it; Close releases everything.
type BMC struct {
	opts Options
	ca   *CA
	now  func() time.Time // the clock; tests in this package may replace it before Start

	mu          sync.Mutex
	started     bool
	closed      bool
	ln          net.Listener
	srv         *http.Server
	url         string
	handlers    sync.WaitGroup // in-flight requests
	connMu      sync.Mutex
	conns       map[net.Conn]struct{} // open connections, tracked through ConnState
	connsWG     sync.WaitGroup        // one per connection until StateClosed
	serveDone   chan struct{}
	done        chan struct{} // closed by Close: ends hung and delayed requests
	systems     []*system     // in Options.Systems order; their power and resets are guarded by mu
	resets      []ResetType
	sessions    map[string]*session // by ID
	byToken     map[string]*session
	nextSession int
	created     int
	deleted     int
	expired     int                 // sessions ended by SessionTimeout
	dropped     int                 // sessions ended by ExpireSessions or Manager.Reset
	rejectToken int                 // the next so many requests with a valid session token answer 401 (<0: all)
	loginFails  int                 // session logins refused for bad credentials
	basicFails  int                 // Basic auth refused for bad credentials
	lockouts    map[string]*lockout // by client IP
	requests    map[string]int
	reqLog      []Request
	powerReads  []PowerRead
	latency     time.Duration
	hang        chan struct{} // non-nil while hanging; closed when the hang ends
	failStatus  int
	malformed   bool
	exhausted   bool
}

// system is one ComputerSystem.
type system struct {
	id, name, uuid, serial string
	omitPower              bool
	power                  power
	resets                 []ResetType
}

func (s *system) path() string { return systemsPath + "/" + s.id }

// lockout counts one client IP's recent authentication failures.
type lockout struct {
	fails int
	last  time.Time // of the last failure
}

type session struct {
	id, token, user string
	created, used   time.Time
}

// NewBMC returns an unstarted BMC. It panics if opts are invalid (an unknown
// InitialPowerState or ResetType, a SessionLimitStatus outside 100-599, bad
// or conflicting Systems, NoSessionService with DisableBasicAuth, a negative
// LockoutAfter, LockoutDuration or LoginDelay) or if it cannot generate a
// CA, as httptest does with its own setup failures.
func NewBMC(opts Options) *BMC {
	if opts.Username == "" {
		opts.Username = DefaultUsername
	}
	if opts.Password == "" {
		opts.Password = DefaultPassword
	}
	if opts.Addr == "" {
		opts.Addr = "127.0.0.1:0"
	}
	systems := newSystems(&opts)
	if opts.ManagerID == "" {
		opts.ManagerID = DefaultManagerID
	}
	if opts.ChassisID == "" {
		opts.ChassisID = DefaultChassisID
	}
	if opts.ServiceUUID == "" {
		opts.ServiceUUID = newUUID()
	}
	if opts.Manufacturer == "" {
		opts.Manufacturer = "Contoso"
	}
	if opts.Model == "" {
		opts.Model = "Emulated Server"
	}
	for _, sys := range systems {
		sys.serial = opts.SerialNumber
		if sys.serial == "" {
			sys.serial = "SN" + sys.uuid[:8]
		}
	}
	if opts.SerialNumber == "" {
		opts.SerialNumber = systems[0].serial
	}
	if opts.RedfishVersion == "" {
		opts.RedfishVersion = DefaultRedfishVersion
	}
	if opts.AllowedResetTypes == nil {
		opts.AllowedResetTypes = AllResetTypes
	}
	opts.AllowedResetTypes = append([]ResetType(nil), opts.AllowedResetTypes...)
	for _, t := range opts.AllowedResetTypes {
		if !validResetType(t) {
			panic(fmt.Sprintf("redfish: unknown ResetType %q", t))
		}
	}
	if opts.MaxSessions == 0 {
		opts.MaxSessions = DefaultMaxSessions
	}
	if opts.SessionLimitStatus == 0 {
		opts.SessionLimitStatus = http.StatusServiceUnavailable
	}
	if opts.SessionLimitStatus < 100 || opts.SessionLimitStatus > 599 {
		panic(fmt.Sprintf("redfish: SessionLimitStatus %d is not an HTTP status", opts.SessionLimitStatus))
	}
	if opts.NoSessionService && opts.DisableBasicAuth {
		panic("redfish: NoSessionService with DisableBasicAuth leaves no way to authenticate")
	}
	if opts.LockoutAfter < 0 || opts.LockoutDuration < 0 || opts.LoginDelay < 0 {
		panic("redfish: negative LockoutAfter, LockoutDuration or LoginDelay")
	}
	if opts.LockoutAfter > 0 && opts.LockoutDuration == 0 {
		opts.LockoutDuration = DefaultLockoutDuration
	}
	if opts.ErrorLog == nil {
		opts.ErrorLog = log.New(io.Discard, "", 0)
	}
	b := &BMC{
		opts:     opts,
		ca:       opts.CA,
		now:      time.Now,
		done:     make(chan struct{}),
		sessions: map[string]*session{},
		byToken:  map[string]*session{},
		requests: map[string]int{},
		systems:  systems,
		lockouts: map[string]*lockout{},
	}
	if !opts.PlainHTTP && b.ca == nil {
		ca, err := NewCA()
		if err != nil {
			panic("redfish: " + err.Error())
		}
		b.ca = ca
	}
	return b
}

// newSystems validates and completes opts' systems: Options.Systems, or the
// single system of SystemID, SystemName, SystemUUID and InitialPowerState,
// which it then sets to the first system's values.
func newSystems(opts *Options) []*system {
	specs := opts.Systems
	if len(specs) == 0 {
		specs = []SystemSpec{{ID: opts.SystemID, Name: opts.SystemName, UUID: opts.SystemUUID, InitialPowerState: opts.InitialPowerState}}
		if specs[0].ID == "" {
			specs[0].ID = DefaultSystemID
		}
	} else if opts.SystemID != "" || opts.SystemName != "" || opts.SystemUUID != "" || opts.InitialPowerState != "" {
		panic("redfish: Systems replaces SystemID, SystemName, SystemUUID and InitialPowerState; set only one of them")
	}
	out := make([]*system, 0, len(specs))
	seen := map[string]bool{}
	for _, sp := range specs {
		if len(opts.Systems) > 0 && (sp.ID == "" || strings.Contains(sp.ID, "/") || seen[sp.ID]) {
			panic(fmt.Sprintf("redfish: system ID %q is empty, has a slash or is a duplicate", sp.ID))
		}
		seen[sp.ID] = true
		if sp.Name == "" {
			sp.Name = "System"
		}
		if sp.UUID == "" {
			sp.UUID = newUUID()
		}
		switch sp.InitialPowerState {
		case "":
			sp.InitialPowerState = PowerOn
		case PowerOn, PowerOff:
		default:
			panic(fmt.Sprintf("redfish: InitialPowerState %q is not On or Off", sp.InitialPowerState))
		}
		s := &system{id: sp.ID, name: sp.Name, uuid: sp.UUID, omitPower: sp.OmitPowerState}
		s.power.final = sp.InitialPowerState
		out = append(out, s)
	}
	opts.SystemID, opts.SystemName, opts.SystemUUID = out[0].id, out[0].name, out[0].uuid
	opts.InitialPowerState = out[0].power.final
	return out
}

// Start listens on Options.Addr and serves in the background. It fails if
// the address is not loopback or cannot be bound, and if the BMC was already
// started or closed.
func (b *BMC) Start() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.started || b.closed {
		return errors.New("redfish: BMC already started or closed")
	}
	host, port, err := net.SplitHostPort(b.opts.Addr)
	if err != nil {
		return fmt.Errorf("redfish: Addr %q: %w", b.opts.Addr, err)
	}
	if host == "localhost" {
		host = "127.0.0.1"
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("redfish: Addr %q is not a loopback address", b.opts.Addr)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, port))
	if err != nil {
		return fmt.Errorf("redfish: listen: %w", err)
	}
	scheme := "http"
	if !b.opts.PlainHTTP {
		cert, err := b.ca.issueServer()
		if err != nil {
			ln.Close()
			return fmt.Errorf("redfish: %w", err)
		}
		ln = tls.NewListener(ln, &tls.Config{
			Certificates: []tls.Certificate{cert},
			MinVersion:   tls.VersionTLS12,
			NextProtos:   []string{"http/1.1"}, // BMCs speak HTTP/1.1
		})
		scheme = "https"
	}
	b.ln = ln
	b.url = scheme + "://" + ln.Addr().String()
	b.conns = map[net.Conn]struct{}{}
	b.srv = &http.Server{
		Handler:           http.HandlerFunc(b.serveHTTP),
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          b.opts.ErrorLog,
		ConnState:         b.connState,
	}
	b.serveDone = make(chan struct{})
	b.started = true
	go func(srv *http.Server, ln net.Listener, done chan struct{}) {
		defer close(done)
		_ = srv.Serve(ln) // returns http.ErrServerClosed after Close
	}(b.srv, ln, b.serveDone)
	return nil
}

// Close stops the BMC: it closes the listener and every connection, ends
// hung and delayed requests (their clients get no answer), and returns once
// the server goroutine and every request handler have returned and every
// connection is closed. Calling it again, or on an unstarted BMC, is a no-op.
func (b *BMC) Close() {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.closed = true
	// A BMC that goes away takes its session table with it (as one that loses power
	// does): its open sessions count as dropped, not leaked.
	b.dropped += len(b.sessions)
	b.sessions = map[string]*session{}
	b.byToken = map[string]*session{}
	srv, serveDone := b.srv, b.serveDone
	b.mu.Unlock()
	if srv != nil {
		_ = srv.Close() // listener and connections first: a released handler cannot answer
	}
	close(b.done)
	if srv == nil {
		return
	}
	<-serveDone
	// Serve has returned, so no connection can appear any more; close again
	// any that was accepted while srv.Close ran.
	b.connMu.Lock()
	for c := range b.conns {
		_ = c.Close()
	}
	b.connMu.Unlock()
	b.handlers.Wait()
	b.connsWG.Wait()
}

// connState tracks connections so that Close can wait for all of them.
func (b *BMC) connState(c net.Conn, s http.ConnState) {
	b.connMu.Lock()
	defer b.connMu.Unlock()
	switch s {
	case http.StateNew:
		b.conns[c] = struct{}{}
		b.connsWG.Add(1)
	case http.StateClosed, http.StateHijacked:
		if _, ok := b.conns[c]; ok {
			delete(b.conns, c)
			b.connsWG.Done()
		}
	}
}

// URL returns the base URL, such as https://127.0.0.1:40123 (no trailing
// slash), or "" before Start.
func (b *BMC) URL() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.url
}

// Host returns the host part of URL ("127.0.0.1"), as bmclib.NewClient wants it.
func (b *BMC) Host() string {
	u, err := url.Parse(b.URL())
	if err != nil {
		return ""
	}
	return u.Hostname()
}

// Port returns the port part of URL, as bmclib.WithRedfishPort wants it.
func (b *BMC) Port() string {
	u, err := url.Parse(b.URL())
	if err != nil {
		return ""
	}
	return u.Port()
}

// Username and Password return the valid credentials.
func (b *BMC) Username() string { return b.opts.Username }

// Password returns the valid password.
func (b *BMC) Password() string { return b.opts.Password }

// SystemPath returns the (first) ComputerSystem's URI, /redfish/v1/Systems/{id}.
func (b *BMC) SystemPath() string { return "/redfish/v1/Systems/" + b.opts.SystemID }

// CA returns the certificate of the CA that issued the server certificate,
// or nil for a plain-HTTP BMC.
func (b *BMC) CA() *x509.Certificate {
	if b.ca == nil {
		return nil
	}
	return b.ca.Certificate()
}

// CAPEM returns CA PEM-encoded, or nil for a plain-HTTP BMC.
func (b *BMC) CAPEM() []byte {
	if b.ca == nil {
		return nil
	}
	return b.ca.PEM()
}

// CertPool returns a pool holding only CA (nil for a plain-HTTP BMC).
func (b *BMC) CertPool() *x509.CertPool {
	if b.ca == nil {
		return nil
	}
	return b.ca.Pool()
}

// Client returns a new HTTP client that verifies the BMC's certificate
// against CA (and nothing else). Its caller should CloseIdleConnections when
// done with it.
func (b *BMC) Client() *http.Client {
	tr := &http.Transport{ForceAttemptHTTP2: false}
	if b.ca != nil {
		tr.TLSClientConfig = &tls.Config{RootCAs: b.ca.Pool(), MinVersion: tls.VersionTLS12}
	}
	return &http.Client{Transport: tr}
}

// ---- state and counters ----

// PowerState returns the (first) host's power state now
// (PoweringOn/PoweringOff during a transition).
func (b *BMC) PowerState() PowerState { return b.SystemPowerState(b.systems[0].id) }

// SetPowerState sets the (first) host's power state at once, cancelling any
// transition, as if someone pressed the button or pulled the plug. Any
// PowerState is accepted, transitional ones included (they then last until
// the next change).
func (b *BMC) SetPowerState(s PowerState) { b.SetSystemPowerState(b.systems[0].id, s) }

// SystemPowerState is PowerState for the system with the given ID. It panics
// if there is no such system.
func (b *BMC) SystemPowerState(id string) PowerState {
	sys := b.system(id)
	b.mu.Lock()
	defer b.mu.Unlock()
	return sys.power.current(b.now())
}

// SetSystemPowerState is SetPowerState for the system with the given ID. It
// panics if there is no such system.
func (b *BMC) SetSystemPowerState(id string, s PowerState) {
	sys := b.system(id)
	b.mu.Lock()
	defer b.mu.Unlock()
	sys.power.set(s)
}

// system returns the system with the given ID, or panics.
func (b *BMC) system(id string) *system {
	for _, s := range b.systems {
		if s.id == id {
			return s
		}
	}
	panic(fmt.Sprintf("redfish: no system %q", id))
}

// Resets returns the ResetTypes of every accepted ComputerSystem.Reset, on
// any system, in order (no-ops included, refused ones not).
func (b *BMC) Resets() []ResetType {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]ResetType(nil), b.resets...)
}

// SystemResets is Resets for the system with the given ID only. It panics
// if there is no such system.
func (b *BMC) SystemResets(id string) []ResetType {
	sys := b.system(id)
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]ResetType(nil), sys.resets...)
}

// ActiveSessions returns the number of live sessions (expired ones are not
// counted).
func (b *BMC) ActiveSessions() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.expireLocked(b.now())
	return len(b.sessions)
}

// SessionsCreated returns the number of successful logins since NewBMC.
func (b *BMC) SessionsCreated() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.created
}

// SessionsDeleted returns the number of sessions deleted by a DELETE (not
// by expiry or ExpireSessions) since NewBMC.
func (b *BMC) SessionsDeleted() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.deleted
}

// LoginFailures returns the number of session logins refused for bad
// credentials (Basic auth failures are not counted; see FailedLogins).
func (b *BMC) LoginFailures() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.loginFails
}

// FailedLogins returns the number of authentications refused for bad
// credentials, session logins (LoginFailures) and Basic auth together: the
// failures Options.LockoutAfter counts. Attempts refused by a lockout are
// not failures.
func (b *BMC) FailedLogins() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.loginFails + b.basicFails
}

// LockedOut reports whether some client IP is locked out now
// (Options.LockoutAfter).
func (b *BMC) LockedOut() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	for ip := range b.lockouts {
		if b.lockedOutLocked(ip, now) {
			return true
		}
	}
	return false
}

// ExpireSessions invalidates every session at once, as a BMC reboot does:
// their tokens answer 401 from now on.
func (b *BMC) ExpireSessions() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.dropped += len(b.sessions)
	b.sessions = map[string]*session{}
	b.byToken = map[string]*session{}
}

// SessionsEnded returns the number of sessions that ended since NewBMC: by a
// DELETE (SessionsDeleted), by SessionTimeout, or by ExpireSessions or
// Manager.Reset (a BMC reboot).
func (b *BMC) SessionsEnded() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.expireLocked(b.now())
	return b.deleted + b.expired + b.dropped
}

// CheckSessions returns an error, naming the counts, unless every session
// created so far has ended (SessionsCreated == SessionsEnded): a client that
// leaves a session behind fills the BMC's session table, and real BMCs then
// refuse every login, an operator's too.
func (b *BMC) CheckSessions() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.expireLocked(b.now())
	if ended := b.deleted + b.expired + b.dropped; ended != b.created {
		return fmt.Errorf("redfish: %d sessions created, %d ended (%d deleted, %d timed out, %d dropped by a BMC reset): %d left open",
			b.created, ended, b.deleted, b.expired, b.dropped, b.created-ended)
	}
	return nil
}

// Requests returns how many requests the BMC received, by "METHOD path"
// where path has its trailing slash removed ("GET /redfish/v1"). Every
// request counts, including those answered by a fault.
func (b *BMC) Requests() map[string]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := make(map[string]int, len(b.requests))
	for k, v := range b.requests {
		m[k] = v
	}
	return m
}

// RequestCount returns Requests()[method + " " + path], path normalized the
// same way.
func (b *BMC) RequestCount(method, path string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.requests[method+" "+normalizePath(path)]
}

// PowerReads returns every ComputerSystem document served so far, in order: a
// failover test measures from the reading that first said off.
func (b *BMC) PowerReads() []PowerRead {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.powerReads)
}

// RequestLog returns every request received, in order.
func (b *BMC) RequestLog() []Request {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]Request(nil), b.reqLog...)
}

// ResetRequests clears Requests and RequestLog.
func (b *BMC) ResetRequests() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.requests = map[string]int{}
	b.reqLog = nil
}

// ---- fault injection (all take effect for requests that arrive afterwards,
// except SetHang(false), which also releases requests already hung) ----

// SetLatency delays every answer by d (0 turns it off). A delayed request
// still ends early if its client goes away or the BMC is closed.
func (b *BMC) SetLatency(d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.latency = d
}

// SetHang makes the BMC accept connections and read requests but never
// answer, until SetHang(false) (the held requests then proceed normally),
// the client gives up (its context ends or it closes the connection), or
// Close.
func (b *BMC) SetHang(on bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case on && b.hang == nil:
		b.hang = make(chan struct{})
	case !on && b.hang != nil:
		close(b.hang)
		b.hang = nil
	}
}

// SetFailStatus makes every request, the unauthenticated ones included,
// answer code with a Redfish error body (and WWW-Authenticate for 401). Zero
// turns it off. It panics if code is not 0 or in 100-599.
func (b *BMC) SetFailStatus(code int) {
	if code != 0 && (code < 100 || code > 599) {
		panic("redfish: SetFailStatus: not an HTTP status: " + strconv.Itoa(code))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failStatus = code
}

// SetMalformed makes every JSON body the BMC sends invalid JSON (truncated),
// with the status code and headers unchanged; the request's effects (a
// login, a reset) still happen.
func (b *BMC) SetMalformed(on bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.malformed = on
}

// SetRejectSessionTokens makes the next n requests that carry a valid
// session token (a DELETE of a session included) answer 401 NoValidSession,
// while the session stays: a BMC whose session table lags its login answers,
// or that refuses an account's fresh session. n < 0: every such request, until
// SetRejectSessionTokens(0). Basic auth is not affected.
func (b *BMC) SetRejectSessionTokens(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.rejectToken = n
}

// SetSessionExhausted makes every login with valid credentials answer as if
// the session limit were reached, however many sessions are open.
func (b *BMC) SetSessionExhausted(on bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.exhausted = on
}

func newUUID() string {
	var u [16]byte
	if _, err := rand.Read(u[:]); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	h := hex.EncodeToString(u[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

func newToken() string {
	var t [24]byte
	if _, err := rand.Read(t[:]); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	return hex.EncodeToString(t[:])
}
