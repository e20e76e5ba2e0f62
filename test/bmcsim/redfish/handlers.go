package redfish

import (
	"cmp"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

const (
	rootPath        = "/redfish/v1"
	sessionService  = rootPath + "/SessionService"
	sessionsPath    = sessionService + "/Sessions"
	systemsPath     = rootPath + "/Systems"
	managersPath    = rootPath + "/Managers"
	chassisPath     = rootPath + "/Chassis"
	maxRequestBytes = 1 << 20
)

// normalizePath drops one trailing slash, so /redfish/v1/ and /redfish/v1
// are the same resource, as on real BMCs.
func normalizePath(p string) string {
	if len(p) > 1 && strings.HasSuffix(p, "/") {
		return p[:len(p)-1]
	}
	return p
}

// isRead reports whether r is a GET or a HEAD (which Go's server answers
// with the GET's headers and no body).
func isRead(r *http.Request) bool {
	return r.Method == http.MethodGet || r.Method == http.MethodHead
}

func authKind(r *http.Request) string {
	switch {
	case r.Header.Get("X-Auth-Token") != "":
		return "session"
	case strings.HasPrefix(r.Header.Get("Authorization"), "Basic "):
		return "basic"
	default:
		return "none"
	}
}

// responder writes JSON answers, corrupting them when malformed is set.
type responder struct {
	w         http.ResponseWriter
	malformed bool
}

func (rs responder) json(status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("redfish: marshal: %v", err)) // our own maps: cannot happen
	}
	if rs.malformed {
		// A JSON object cut before its closing brace is never valid JSON.
		body = body[:len(body)/2]
	}
	h := rs.w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("OData-Version", "4.0")
	h.Set("Cache-Control", "no-cache")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	rs.w.WriteHeader(status)
	_, _ = rs.w.Write(body)
}

func (rs responder) noContent() {
	rs.w.Header().Set("OData-Version", "4.0")
	rs.w.WriteHeader(http.StatusNoContent)
}

func (rs responder) unauthorized(body map[string]any) {
	rs.w.Header().Set("WWW-Authenticate", `Basic realm="Redfish"`)
	rs.json(http.StatusUnauthorized, body)
}

func (rs responder) notFound(path string) {
	rs.json(http.StatusNotFound, redfishError(msgResourceNotFound,
		fmt.Sprintf("The requested resource of type Resource named '%s' was not found.", path),
		"Provide a valid resource identifier and resubmit the request."))
}

func (rs responder) methodNotAllowed(allow ...string) {
	rs.w.Header().Set("Allow", strings.Join(allow, ", "))
	rs.json(http.StatusMethodNotAllowed, redfishError(msgOperationNotAllowed,
		"The HTTP method is not allowed on this resource.",
		"None."))
}

func (rs responder) badRequest(id, message, resolution string) {
	rs.json(http.StatusBadRequest, redfishError(id, message, resolution))
}

// serveHTTP is the BMC's handler: it records the request, applies the
// injected faults, authenticates, and routes.
func (b *BMC) serveHTTP(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	b.handlers.Add(1)
	defer b.handlers.Done()
	p := normalizePath(r.URL.Path)
	b.requests[r.Method+" "+p]++
	b.reqLog = append(b.reqLog, Request{Method: r.Method, Path: r.URL.Path, Auth: authKind(r)})
	latency, hang := b.latency, b.hang
	b.mu.Unlock()

	// A request abandoned by its client, or cut by Close, gets no answer at
	// all: ErrAbortHandler drops the connection (returning normally would
	// send an empty 200).
	if latency > 0 {
		b.pause(r, latency)
	}
	if hang != nil {
		select {
		case <-hang:
		case <-r.Context().Done():
			panic(http.ErrAbortHandler)
		case <-b.done:
			panic(http.ErrAbortHandler)
		}
	}

	b.mu.Lock()
	fail := b.failStatus
	rs := responder{w: w, malformed: b.malformed}
	b.mu.Unlock()
	if fail != 0 {
		if fail == http.StatusUnauthorized {
			rs.unauthorized(statusError(fail))
		} else {
			rs.json(fail, statusError(fail))
		}
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxRequestBytes)

	// Unauthenticated resources (DSP0266: the version document, the service
	// root, and the login POST).
	switch {
	case p == "/redfish":
		if !isRead(r) {
			rs.methodNotAllowed(http.MethodGet, http.MethodHead)
			return
		}
		rs.json(http.StatusOK, map[string]any{"v1": "/redfish/v1/"})
		return
	case p == rootPath:
		if !isRead(r) {
			rs.methodNotAllowed(http.MethodGet, http.MethodHead)
			return
		}
		rs.json(http.StatusOK, b.serviceRoot())
		return
	case p == sessionsPath && r.Method == http.MethodPost:
		if b.opts.NoSessionService {
			rs.notFound(r.URL.Path)
			return
		}
		b.login(rs, r)
		return
	}

	if !b.authenticate(r) {
		rs.unauthorized(errNoValidSession())
		return
	}
	b.route(rs, r, p)
}

// pause waits d, or ends the request with no answer at all if its client
// goes away or the BMC closes: ErrAbortHandler drops the connection
// (returning normally would send an empty 200).
func (b *BMC) pause(r *http.Request, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
		panic(http.ErrAbortHandler)
	case <-b.done:
		panic(http.ErrAbortHandler)
	}
}

// authenticate checks X-Auth-Token (preferred) or Basic credentials, and
// renews the session a valid token belongs to. A locked-out client is
// refused whatever it sends; a Basic failure counts towards its lockout.
func (b *BMC) authenticate(r *http.Request) bool {
	ip := clientIP(r)
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	if b.lockedOutLocked(ip, now) {
		return false
	}
	if tok := r.Header.Get("X-Auth-Token"); tok != "" {
		b.expireLocked(now)
		s := b.byToken[tok]
		if s == nil {
			return false
		}
		if b.rejectToken != 0 {
			if b.rejectToken > 0 {
				b.rejectToken--
			}
			return false
		}
		s.used = now
		return true
	}
	if b.opts.DisableBasicAuth {
		return false
	}
	user, pass, ok := r.BasicAuth()
	if !ok {
		return false
	}
	if !b.validCredentials(user, pass) {
		b.basicFails++
		b.failLocked(ip, now)
		return false
	}
	return true
}

// clientIP is the host part of r's remote address.
func clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// lockedOutLocked reports whether ip is locked out at now, forgetting its
// failures once LockoutDuration has passed since the last one.
func (b *BMC) lockedOutLocked(ip string, now time.Time) bool {
	l := b.lockouts[ip]
	if l == nil {
		return false
	}
	if now.Sub(l.last) >= b.opts.LockoutDuration {
		delete(b.lockouts, ip)
		return false
	}
	return l.fails >= b.opts.LockoutAfter
}

// failLocked counts an authentication failure from ip towards its lockout.
// Its callers first ask lockedOutLocked, which forgets failures too old to
// count.
func (b *BMC) failLocked(ip string, now time.Time) {
	if b.opts.LockoutAfter <= 0 {
		return
	}
	l := b.lockouts[ip]
	if l == nil {
		l = &lockout{}
		b.lockouts[ip] = l
	}
	l.fails++
	l.last = now
}

func (b *BMC) validCredentials(user, pass string) bool {
	u := subtle.ConstantTimeCompare([]byte(user), []byte(b.opts.Username))
	p := subtle.ConstantTimeCompare([]byte(pass), []byte(b.opts.Password))
	return u&p == 1
}

// expireLocked drops sessions idle for longer than SessionTimeout.
func (b *BMC) expireLocked(now time.Time) {
	if b.opts.SessionTimeout <= 0 {
		return
	}
	for id, s := range b.sessions {
		if now.Sub(s.used) > b.opts.SessionTimeout {
			delete(b.sessions, id)
			delete(b.byToken, s.token)
			b.expired++
		}
	}
}

func (b *BMC) route(rs responder, r *http.Request, p string) {
	mgr := managersPath + "/" + b.opts.ManagerID
	ch := chassisPath + "/" + b.opts.ChassisID
	get := func(v func() map[string]any) {
		if !isRead(r) {
			rs.methodNotAllowed(http.MethodGet, http.MethodHead)
			return
		}
		rs.json(http.StatusOK, v())
	}
	if b.opts.NoSessionService && (p == sessionService || strings.HasPrefix(p, sessionService+"/")) {
		rs.notFound(r.URL.Path)
		return
	}
	for _, sys := range b.systems {
		switch p {
		case sys.path():
			if !isRead(r) {
				rs.methodNotAllowed(http.MethodGet, http.MethodHead)
				return
			}
			doc, etag := b.systemDoc(sys)
			rs.w.Header().Set("ETag", etag)
			rs.json(http.StatusOK, doc)
			return
		case sys.path() + "/Actions/ComputerSystem.Reset":
			if r.Method != http.MethodPost {
				rs.methodNotAllowed(http.MethodPost)
				return
			}
			b.reset(rs, r, sys)
			return
		case sys.path() + "/OperatingSystem":
			if b.opts.ModernSchema {
				get(func() map[string]any { return operatingSystemDoc(sys) })
				return
			}
		}
	}
	switch p {
	case sessionService:
		get(b.sessionServiceDoc)
	case sessionsPath:
		if !isRead(r) {
			rs.methodNotAllowed(http.MethodGet, http.MethodHead, http.MethodPost)
			return
		}
		rs.json(http.StatusOK, b.sessionCollection())
	case systemsPath:
		get(func() map[string]any {
			return collection("#ComputerSystemCollection.ComputerSystemCollection", systemsPath, "Computer System Collection", b.systemPaths()...)
		})
	case managersPath:
		get(func() map[string]any {
			return collection("#ManagerCollection.ManagerCollection", managersPath, "Manager Collection", mgr)
		})
	case mgr:
		get(b.managerDoc)
	case mgr + "/Actions/Manager.Reset":
		if r.Method != http.MethodPost {
			rs.methodNotAllowed(http.MethodPost)
			return
		}
		// A BMC reboot: every session ends; the host is not affected.
		b.ExpireSessions()
		rs.noContent()
	case chassisPath:
		get(func() map[string]any {
			return collection("#ChassisCollection.ChassisCollection", chassisPath, "Chassis Collection", ch)
		})
	case ch:
		get(b.chassisDoc)
	default:
		if id, ok := strings.CutPrefix(p, sessionsPath+"/"); ok && id != "" && !strings.Contains(id, "/") {
			b.sessionItem(rs, r, id)
			return
		}
		rs.notFound(r.URL.Path)
	}
}

// ---- sessions ----

func (b *BMC) login(rs responder, r *http.Request) {
	var req struct {
		UserName *string
		Password *string
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		rs.badRequest(msgMalformedJSON,
			"The request body submitted was malformed JSON and could not be parsed by the receiving service.",
			"Ensure that the request body is valid JSON and resubmit the request.")
		return
	}
	for _, m := range []struct {
		name string
		v    *string
	}{{"UserName", req.UserName}, {"Password", req.Password}} {
		if m.v == nil {
			rs.badRequest(msgPropertyMissing,
				fmt.Sprintf("The property %s is a required property and must be included in the request.", m.name),
				"Ensure that the property is in the request body and has a valid value and resubmit the request if the operation failed.")
			return
		}
	}
	ip := clientIP(r)
	b.mu.Lock()
	now := b.now()
	refusal := ""
	switch {
	case b.lockedOutLocked(ip, now):
		refusal = "Too many failed logins: the client is locked out"
	case !b.validCredentials(*req.UserName, *req.Password):
		b.loginFails++
		b.failLocked(ip, now)
		refusal = "Invalid username or password"
	}
	if refusal != "" {
		b.mu.Unlock()
		rs.unauthorized(redfishError(msgResourceAtURIUnauthorized,
			fmt.Sprintf("While accessing the resource at '%s', the service received an authorization error '%s'.", r.URL.Path, refusal),
			"Ensure that the appropriate access is provided for the service in order for it to access the URI."))
		return
	}

	b.expireLocked(now)
	if b.exhausted || (b.opts.MaxSessions > 0 && len(b.sessions) >= b.opts.MaxSessions) {
		b.mu.Unlock()
		rs.json(b.opts.SessionLimitStatus, redfishError(msgSessionLimitExceeded,
			"The session establishment failed due to the number of simultaneous sessions exceeding the limit of the implementation.",
			"Reduce the number of other sessions before trying to establish the session or increase the limit of simultaneous sessions, if supported."))
		return
	}
	b.nextSession++
	s := &session{
		id:      strconv.Itoa(b.nextSession),
		token:   newToken(),
		user:    *req.UserName,
		created: now,
		used:    now,
	}
	b.sessions[s.id] = s
	b.byToken[s.token] = s
	b.created++
	doc := sessionDoc(s)
	b.mu.Unlock()

	if b.opts.LoginDelay > 0 {
		b.pause(r, b.opts.LoginDelay)
	}
	if !b.opts.LoginOmitsToken {
		rs.w.Header().Set("X-Auth-Token", s.token)
	}
	if !b.opts.LoginOmitsLocation {
		rs.w.Header().Set("Location", sessionsPath+"/"+s.id)
	}
	rs.json(http.StatusCreated, doc)
}

func (b *BMC) sessionItem(rs responder, r *http.Request, id string) {
	b.mu.Lock()
	s := b.sessions[id]
	if s == nil {
		b.mu.Unlock()
		rs.notFound(r.URL.Path)
		return
	}
	doc := sessionDoc(s)
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		b.mu.Unlock()
		rs.json(http.StatusOK, doc)
	case http.MethodDelete:
		delete(b.sessions, id)
		delete(b.byToken, s.token)
		b.deleted++
		b.mu.Unlock()
		rs.noContent()
	default:
		b.mu.Unlock()
		rs.methodNotAllowed(http.MethodGet, http.MethodHead, http.MethodDelete)
	}
}

func sessionDoc(s *session) map[string]any {
	return map[string]any{
		"@odata.type": "#Session.v1_7_0.Session",
		"@odata.id":   sessionsPath + "/" + s.id,
		"Id":          s.id,
		"Name":        "User Session",
		"UserName":    s.user,
		"SessionType": "Redfish",
		"CreatedTime": s.created.UTC().Format(time.RFC3339),
		"Password":    nil,
	}
}

func (b *BMC) sessionCollection() map[string]any {
	b.mu.Lock()
	b.expireLocked(b.now())
	ids := make([]string, 0, len(b.sessions))
	for id := range b.sessions {
		ids = append(ids, sessionsPath+"/"+id)
	}
	b.mu.Unlock()
	sortPaths(ids)
	return collection("#SessionCollection.SessionCollection", sessionsPath, "Session Collection", ids...)
}

func (b *BMC) sessionServiceDoc() map[string]any {
	return map[string]any{
		"@odata.type":    "#SessionService.v1_1_9.SessionService",
		"@odata.id":      sessionService,
		"Id":             "SessionService",
		"Name":           "Session Service",
		"ServiceEnabled": true,
		"SessionTimeout": advertisedSessionTimeout(b.opts.SessionTimeout),
		"Sessions":       link(sessionsPath),
		"Status":         map[string]any{"State": "Enabled", "Health": "OK"},
	}
}

// advertisedSessionTimeout is SessionService.SessionTimeout in seconds: the schema
// allows 30 to 86400. A BMC whose sessions never expire here (d zero) advertises the
// largest value; a timeout outside the range (a test's short one) is advertised
// clamped into it, while sessions still expire after d.
func advertisedSessionTimeout(d time.Duration) int {
	if d <= 0 {
		return 86400
	}
	return min(max(int(d/time.Second), 30), 86400)
}

// ---- power ----

func (b *BMC) reset(rs responder, r *http.Request, sys *system) {
	var req struct {
		ResetType *ResetType
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		rs.badRequest(msgMalformedJSON,
			"The request body submitted was malformed JSON and could not be parsed by the receiving service.",
			"Ensure that the request body is valid JSON and resubmit the request.")
		return
	}
	if req.ResetType == nil {
		rs.badRequest(msgActionParameterMissing,
			"The action ComputerSystem.Reset requires the parameter ResetType to be present in the request body.",
			"Supply the action with the required parameter in the request body when the request is resubmitted.")
		return
	}
	t := *req.ResetType
	allowed := false
	for _, a := range b.opts.AllowedResetTypes {
		allowed = allowed || a == t
	}
	if !allowed {
		rs.badRequest(msgActionParameterNotSupp,
			fmt.Sprintf("The parameter ResetType for the action ComputerSystem.Reset is not supported on the target resource (value '%s').", t),
			"Remove the parameter supplied and resubmit the request if the operation failed.")
		return
	}

	b.mu.Lock()
	now := b.now()
	if ifMatch := r.Header.Get("If-Match"); b.opts.StrictETag && ifMatch != "" && ifMatch != "*" {
		if cur := etagLocked(sys, now); ifMatch != cur {
			b.mu.Unlock()
			rs.json(http.StatusPreconditionFailed, redfishError(msgPreconditionFailed,
				"The ETag supplied did not match the ETag required to change this resource.",
				"Try the operation again using the appropriate ETag."))
			return
		}
	}
	err := sys.power.reset(t, now, b.opts.TransitionDelay, b.opts.StrictReset)
	if err == nil {
		b.resets = append(b.resets, t)
		sys.resets = append(sys.resets, t)
	}
	b.mu.Unlock()

	var conflict errConflict
	switch {
	case errors.As(err, &conflict):
		rs.json(http.StatusConflict, redfishError(msgResourceInStandby, conflict.msg,
			"Check the system's power state before requesting this reset."))
	case err != nil:
		rs.json(http.StatusInternalServerError, statusError(http.StatusInternalServerError))
	default:
		rs.noContent()
	}
}

// etagLocked is a weak ETag that changes whenever the ComputerSystem does.
func etagLocked(sys *system, now time.Time) string {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%d/%s", sys.id, sys.power.gen, sys.power.current(now))
	return fmt.Sprintf(`W/"%016x"`, h.Sum64())
}

// ---- documents ----

func link(path string) map[string]any { return map[string]any{"@odata.id": path} }

func links(paths ...string) []any {
	out := make([]any, 0, len(paths))
	for _, p := range paths {
		out = append(out, link(p))
	}
	return out
}

func collection(odataType, path, name string, members ...string) map[string]any {
	return map[string]any{
		"@odata.type":         odataType,
		"@odata.id":           path,
		"Name":                name,
		"Members@odata.count": len(members),
		"Members":             links(members...),
	}
}

func (b *BMC) serviceRoot() map[string]any {
	root := map[string]any{
		"@odata.type":    "#ServiceRoot.v1_16_0.ServiceRoot",
		"@odata.id":      rootPath + "/",
		"Id":             "RootService",
		"Name":           "Root Service",
		"RedfishVersion": b.opts.RedfishVersion,
		"UUID":           b.opts.ServiceUUID,
		"Product":        "bmcsim Redfish emulator",
		"Vendor":         "baremetal-ccm",
		"Systems":        link(systemsPath),
		"Chassis":        link(chassisPath),
		"Managers":       link(managersPath),
		"SessionService": link(sessionService),
		"Links": map[string]any{
			"Sessions":                link(sessionsPath),
			"ManagerProvidingService": link(managersPath + "/" + b.opts.ManagerID),
		},
		"ProtocolFeaturesSupported": map[string]any{
			"ExpandQuery":     map[string]any{"ExpandAll": false, "Levels": false, "Links": false, "NoLinks": false},
			"FilterQuery":     false,
			"SelectQuery":     false,
			"ExcerptQuery":    false,
			"OnlyMemberQuery": false,
		},
	}
	if b.opts.NoSessionService {
		delete(root, "SessionService")
		delete(root["Links"].(map[string]any), "Sessions")
	}
	for name, id := range b.opts.RootLinks {
		if sub, ok := strings.CutPrefix(name, "Links."); ok {
			root["Links"].(map[string]any)[sub] = link(id)
		} else {
			root[name] = link(id)
		}
	}
	return root
}

// systemPaths returns every ComputerSystem's URI, in Options.Systems order.
func (b *BMC) systemPaths() []string {
	paths := make([]string, len(b.systems))
	for i, s := range b.systems {
		paths[i] = s.path()
	}
	return paths
}

// systemDoc returns a ComputerSystem and its ETag.
func (b *BMC) systemDoc(s *system) (map[string]any, string) {
	b.mu.Lock()
	now := b.now()
	state := s.power.current(now)
	etag := etagLocked(s, now)
	b.powerReads = append(b.powerReads, PowerRead{At: time.Now(), System: s.id, State: state})
	b.mu.Unlock()
	sys := s.path()
	allowed := make([]string, len(b.opts.AllowedResetTypes))
	for i, t := range b.opts.AllowedResetTypes {
		allowed[i] = string(t)
	}
	doc := map[string]any{
		"@odata.type":  "#ComputerSystem.v1_20_0.ComputerSystem",
		"@odata.id":    sys,
		"@odata.etag":  etag,
		"Id":           s.id,
		"Name":         s.name,
		"SystemType":   "Physical",
		"Manufacturer": b.opts.Manufacturer,
		"Model":        b.opts.Model,
		"SerialNumber": s.serial,
		"UUID":         s.uuid,
		"PowerState":   string(state),
		"Status":       map[string]any{"State": "Enabled", "Health": "OK"},
		"Boot": map[string]any{
			"BootSourceOverrideEnabled": "Disabled",
			"BootSourceOverrideTarget":  "None",
			"BootSourceOverrideMode":    "UEFI",
		},
		"Actions": map[string]any{
			"#ComputerSystem.Reset": map[string]any{
				"target":                            sys + "/Actions/ComputerSystem.Reset",
				"ResetType@Redfish.AllowableValues": allowed,
			},
		},
		"Links": map[string]any{
			"Chassis":   links(chassisPath + "/" + b.opts.ChassisID),
			"ManagedBy": links(managersPath + "/" + b.opts.ManagerID),
		},
	}
	if s.omitPower {
		delete(doc, "PowerState")
	}
	if b.opts.ModernSchema {
		// Properties of ComputerSystem v1_13 to v1_21 that are objects (or
		// enumerations) where older schemas had nothing.
		progress := "None"
		if state == PowerOn && !s.omitPower {
			progress = "OSRunning"
		}
		doc["@odata.type"] = "#ComputerSystem.v1_22_0.ComputerSystem"
		doc["OperatingSystem"] = link(sys + "/OperatingSystem")
		doc["BootProgress"] = map[string]any{"LastState": progress}
		doc["PowerMode"] = "MaximumPerformance"
		doc["Composition"] = map[string]any{"UseCases": []string{}}
	}
	return doc, etag
}

// operatingSystemDoc is the OperatingSystem resource that a modern
// ComputerSystem links to.
func operatingSystemDoc(s *system) map[string]any {
	return map[string]any{
		"@odata.type": "#OperatingSystem.v1_0_0.OperatingSystem",
		"@odata.id":   s.path() + "/OperatingSystem",
		"Id":          "OperatingSystem",
		"Name":        "Operating System",
		"Type":        "Linux",
		"Status":      map[string]any{"State": "Enabled", "Health": "OK"},
	}
}

func (b *BMC) managerDoc() map[string]any {
	mgr := managersPath + "/" + b.opts.ManagerID
	return map[string]any{
		"@odata.type":           "#Manager.v1_19_0.Manager",
		"@odata.id":             mgr,
		"Id":                    b.opts.ManagerID,
		"Name":                  "Manager",
		"ManagerType":           "BMC",
		"FirmwareVersion":       "bmcsim-1.0.0",
		"UUID":                  b.opts.ServiceUUID,
		"ServiceEntryPointUUID": b.opts.ServiceUUID,
		"PowerState":            "On",
		"Status":                map[string]any{"State": "Enabled", "Health": "OK"},
		"Actions": map[string]any{
			"#Manager.Reset": map[string]any{
				"target":                            mgr + "/Actions/Manager.Reset",
				"ResetType@Redfish.AllowableValues": []string{"GracefulRestart", "ForceRestart"},
			},
		},
		"Links": map[string]any{
			"ManagerForServers": links(b.systemPaths()...),
			"ManagerForChassis": links(chassisPath + "/" + b.opts.ChassisID),
		},
	}
}

// chassisDoc is the Chassis holding every system; its PowerState is the
// first system's (absent when that system's is).
func (b *BMC) chassisDoc() map[string]any {
	first := b.systems[0]
	b.mu.Lock()
	state := first.power.current(b.now())
	b.mu.Unlock()
	doc := map[string]any{
		"@odata.type":  "#Chassis.v1_25_0.Chassis",
		"@odata.id":    chassisPath + "/" + b.opts.ChassisID,
		"Id":           b.opts.ChassisID,
		"Name":         "Chassis",
		"ChassisType":  "RackMount",
		"Manufacturer": b.opts.Manufacturer,
		"Model":        b.opts.Model,
		"SerialNumber": b.opts.SerialNumber,
		"PowerState":   string(state),
		"Status":       map[string]any{"State": "Enabled", "Health": "OK"},
		"Links": map[string]any{
			"ComputerSystems": links(b.systemPaths()...),
			"ManagedBy":       links(managersPath + "/" + b.opts.ManagerID),
		},
	}
	if first.omitPower {
		delete(doc, "PowerState")
	}
	return doc
}

// sortPaths orders session URIs by their decimal ID (shorter first, then
// lexically), that is by creation.
func sortPaths(s []string) {
	slices.SortFunc(s, func(a, b string) int {
		if c := cmp.Compare(len(a), len(b)); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
}
