package ipam

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
)

// Assignment is what a Service holds.
type Assignment struct {
	// IPs in the order of the request's Families (or of current, for Prime).
	IPs []netip.Addr
	// Pools[i] is the pool of IPs[i]; "" when it is in no pool.
	Pools []string
	// OutOfPool are the IPs the Service keeps although no pool contains them any
	// more (the pools changed): report them, the Service is left alone.
	OutOfPool []netip.Addr
}

// PoolUsage is one pool's use of one family, for metrics.
type PoolUsage struct {
	Pool   string
	Family v1.IPFamily
	// Size is the number of assignable addresses, capped at MaxUint64.
	Size uint64
	// Used is the number of distinct addresses in use (a shared IP counts once).
	Used uint64
}

// Allocator assigns load-balancer IPs from pools. It is safe for concurrent use.
//
// Its whole state is derived from the Services: after a restart, Prime it with
// every Service's current IPs before the first Assign, so no IP in use is handed
// out again. Allocation and release cost O(log n) in the number of addresses freed
// below a range's high-water mark, plus map operations; memory is O(1) per
// address in use (plus the free heap below the high-water mark). Ranges are never
// materialized, so an IPv6 /64 costs no more than a /30.
type Allocator struct {
	mu        sync.Mutex
	pools     []*pool // priority, then name
	byName    map[string]*pool
	ranges    []*ipRange // by first address; IPv4 before IPv6
	svcs      map[string]*svcAlloc
	ips       map[netip.Addr]*ipUse
	shared    map[string]map[netip.Addr]struct{} // sharing key -> IPs carrying it
	outOfPool int
	// freeSvcs and freeUses recycle the records of released Services and freed IPs
	// (bounded by maxFree), so steady churn allocates little.
	freeSvcs []*svcAlloc
	freeUses []*ipUse
	// auto are the auto-assign pools in order; autoOpen when none is restricted.
	auto     []*pool
	autoOpen bool
}

type pool struct {
	cfg        config.AddressPool
	name       string
	namespaces map[string]struct{}
	selector   labels.Selector // nil: any Service
	ranges     [2][]*ipRange   // IPv4, IPv6
	size, used [2]uint64
}

// admits reports whether the pool's restrictions let the Service in.
func (p *pool) admits(req *Request) bool {
	if len(p.namespaces) > 0 {
		if _, ok := p.namespaces[req.Namespace]; !ok {
			return false
		}
	}
	return p.selector == nil || p.selector.Matches(labels.Set(req.Labels))
}

func (p *pool) restriction() string {
	var parts []string
	if len(p.namespaces) > 0 {
		parts = append(parts, fmt.Sprintf("namespaces %v", p.cfg.Namespaces))
	}
	if p.selector != nil {
		parts = append(parts, fmt.Sprintf("serviceSelector %q", p.selector.String()))
	}
	return strings.Join(parts, " and ")
}

// svcAlloc is what one Service holds.
type svcAlloc struct {
	key    string
	ips    []netip.Addr
	share  shareAttrs
	ipsBuf [2]netip.Addr
}

// shareAttrs decide whether Services may share an IP (MetalLB's sharing key,
// backend key and ports).
type shareAttrs struct {
	sharing string
	local   bool
	backend string // Local: the selector as a string
	ports   []Port
}

// ipUse is one address in use.
type ipUse struct {
	rng     *ipRange // nil: in no pool
	stale   bool     // still in rng's free heap (see ipRange)
	sharing string
	local   bool
	backend string
	holders []*svcAlloc
	inline  [1]*svcAlloc
}

type planned struct {
	ip  netip.Addr
	rng *ipRange
	ok  bool
}

// New returns an Allocator for pools, which pkg/config has validated (names unique,
// addresses well-formed and not overlapping). The pools are copied.
func New(pools []config.AddressPool) (*Allocator, error) {
	a := &Allocator{
		byName: map[string]*pool{},
		svcs:   map[string]*svcAlloc{},
		ips:    map[netip.Addr]*ipUse{},
		shared: map[string]map[netip.Addr]struct{}{},
	}
	for i := range pools {
		c := pools[i]
		c.Addresses = slices.Clone(c.Addresses)
		c.Namespaces = slices.Clone(c.Namespaces)
		c.Communities = slices.Clone(c.Communities)
		c.LargeCommunities = slices.Clone(c.LargeCommunities)
		if c.ServiceSelector != nil {
			c.ServiceSelector = c.ServiceSelector.DeepCopy()
		}
		p := &pool{cfg: c, name: c.Name}
		if _, dup := a.byName[p.name]; dup {
			return nil, fmt.Errorf("address pool %q is configured twice", p.name)
		}
		a.byName[p.name] = p
		if len(c.Namespaces) > 0 {
			p.namespaces = map[string]struct{}{}
			for _, ns := range c.Namespaces {
				p.namespaces[ns] = struct{}{}
			}
		}
		if c.ServiceSelector != nil {
			sel, err := metav1.LabelSelectorAsSelector(c.ServiceSelector)
			if err != nil {
				return nil, fmt.Errorf("address pool %q: serviceSelector: %w", p.name, err)
			}
			p.selector = sel
		}
		for _, s := range c.Addresses {
			first, last, err := config.ParseAddressRange(s)
			if err != nil {
				return nil, fmt.Errorf("address pool %q: %w", p.name, err)
			}
			r := newRange(p, first, last, c.AvoidBuggyIPs)
			p.ranges[r.family] = append(p.ranges[r.family], r)
			a.ranges = append(a.ranges, r)
			if p.size[r.family] += r.size(); p.size[r.family] < r.size() {
				p.size[r.family] = math.MaxUint64
			}
		}
		// A pool's ranges stay in the order it lists them: auto-assignment takes the
		// lowest free address of the first range that has one (as MetalLB does).
		a.pools = append(a.pools, p)
	}
	sort.Slice(a.pools, func(i, j int) bool {
		if a.pools[i].cfg.Priority != a.pools[j].cfg.Priority {
			return a.pools[i].cfg.Priority < a.pools[j].cfg.Priority
		}
		return a.pools[i].name < a.pools[j].name
	})
	sort.Slice(a.ranges, func(i, j int) bool { return a.ranges[i].first.Less(a.ranges[j].first) })
	a.autoOpen = true
	for _, p := range a.pools {
		if p.cfg.AutoAssignEnabled() {
			a.auto = append(a.auto, p)
			a.autoOpen = a.autoOpen && p.namespaces == nil && p.selector == nil
		}
	}
	for i := 1; i < len(a.ranges); i++ {
		if prev, r := a.ranges[i-1], a.ranges[i]; prev.is4 == r.is4 && r.first.Compare(prev.last) <= 0 {
			return nil, fmt.Errorf("address pools %q and %q overlap (%s-%s and %s-%s)", prev.pool.name, r.pool.name, prev.first, prev.last, r.first, r.last)
		}
	}
	return a, nil
}

// rangeOf returns the range holding ip, nil when ip is in no pool (an .0/.255
// address of an avoidBuggyIPs pool is in no pool).
func (a *Allocator) rangeOf(ip netip.Addr) *ipRange {
	i := sort.Search(len(a.ranges), func(i int) bool { return ip.Less(a.ranges[i].first) })
	if i == 0 {
		return nil
	}
	r := a.ranges[i-1]
	if !r.contains(ip) || (r.avoidBuggy && isBuggy(ip)) {
		return nil
	}
	return r
}

// lowestFree returns the lowest free address of r. It only drops stale heap
// entries and advances next, which changes no answer, so planning may call it.
func (a *Allocator) lowestFree(r *ipRange) (netip.Addr, bool) {
	for len(r.heap) > 0 {
		ip := r.addr(r.heap[0])
		u := a.ips[ip]
		if u == nil {
			return ip, true
		}
		u.stale = false
		r.popHeap()
	}
	for ; r.next < r.limit; r.next++ {
		ip := r.addr(r.next)
		if r.avoidBuggy && isBuggy(ip) {
			continue
		}
		if _, used := a.ips[ip]; !used {
			return ip, true
		}
	}
	return netip.Addr{}, false
}

func famIndex(f v1.IPFamily) int {
	if f == v1.IPv6Protocol {
		return 1
	}
	return 0
}

func ipFamIndex(ip netip.Addr) int {
	if ip.Is4() {
		return 0
	}
	return 1
}

var famNames = [2]v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}

func attrsOf(req *Request) shareAttrs {
	s := shareAttrs{sharing: req.SharingKey, local: req.Local, ports: req.Ports}
	if req.Local {
		s.backend = labels.Set(req.Selector).String()
	}
	return s
}

// holderNames lists up to three other holders of u, for messages.
func holderNames(u *ipUse, key string) string {
	var names []string
	for _, h := range u.holders {
		if h.key != key {
			names = append(names, h.key)
		}
	}
	if len(names) > 3 {
		names = append(names[:3], fmt.Sprintf("and %d more", len(names)-3))
	}
	return strings.Join(names, ", ")
}

// compatible reports whether key may hold u next to its other holders (MetalLB's
// rules): both sharing keys set and equal, the same traffic policy and, for Local,
// the same selector, and no protocol/port used twice.
func compatible(u *ipUse, ip netip.Addr, key string, sa *shareAttrs) error {
	others := 0
	for _, h := range u.holders {
		if h.key != key {
			others++
		}
	}
	if others == 0 {
		return nil
	}
	who := holderNames(u, key)
	switch {
	case u.sharing == "":
		return fmt.Errorf("%w: %s is held by service %s, which does not allow sharing: ask for another IP, or set the same annotation %s on both Services", ErrIPInUse, ip, who, AnnotationAllowSharedIP)
	case sa.sharing == "":
		return fmt.Errorf("%w: %s is held by service %s (sharing key %q) and this Service has no %s annotation: set it to %q to share, or ask for another IP", ErrIPInUse, ip, who, u.sharing, AnnotationAllowSharedIP, u.sharing)
	case u.sharing != sa.sharing:
		return fmt.Errorf("%w: %s is held by service %s with sharing key %q, this Service's key is %q: use the same key to share, or ask for another IP", ErrIPInUse, ip, who, u.sharing, sa.sharing)
	case u.local != sa.local:
		return fmt.Errorf("%w: %s is shared by service %s with externalTrafficPolicy %s; Services sharing an IP need the same externalTrafficPolicy", ErrSharingConflict, ip, who, policyName(u.local))
	case u.backend != sa.backend:
		return fmt.Errorf("%w: %s is shared by service %s with externalTrafficPolicy Local and selector %q, this Service's selector is %q: Local Services may share an IP only with the same selector", ErrSharingConflict, ip, who, u.backend, sa.backend)
	}
	for _, h := range u.holders {
		if h.key == key {
			continue
		}
		for _, p := range h.share.ports {
			for _, q := range sa.ports {
				if p == q {
					return fmt.Errorf("%w: port %s on %s is already used by service %s, which shares the IP: use another port or another sharing key", ErrSharingConflict, p, ip, h.key)
				}
			}
		}
	}
	return nil
}

func policyName(local bool) string {
	if local {
		return "Local"
	}
	return "Cluster"
}

// normalize checks the parts of req ParseService also checks (a caller may build
// a Request by hand) and returns the families and explicit IPs by family.
func normalize(key string, req *Request) ([]v1.IPFamily, [2]netip.Addr, error) {
	var explicit [2]netip.Addr
	fams := req.Families
	if len(fams) == 0 {
		fams = []v1.IPFamily{v1.IPv4Protocol}
	}
	if len(fams) > 2 || (len(fams) == 2 && fams[0] == fams[1]) {
		return nil, explicit, fmt.Errorf("%w: service %s: families %v: give IPv4, IPv6 or both once", ErrBadAnnotation, key, fams)
	}
	for _, f := range fams {
		if f != v1.IPv4Protocol && f != v1.IPv6Protocol {
			return nil, explicit, fmt.Errorf("%w: service %s: family %q is not IPv4 or IPv6", ErrBadAnnotation, key, f)
		}
	}
	for _, ip := range req.IPs {
		if !ip.IsValid() || ip.Zone() != "" {
			return nil, explicit, fmt.Errorf("%w: service %s: requested IP %q is not a plain IP address", ErrBadAnnotation, key, ip)
		}
		ip = ip.Unmap()
		fi := ipFamIndex(ip)
		if explicit[fi].IsValid() {
			return nil, explicit, fmt.Errorf("%w: service %s: requested IPs %v hold two %s addresses: give at most one per family", ErrBadAnnotation, key, req.IPs, famNames[fi])
		}
		if !containsFamily(fams, famNames[fi]) {
			return nil, explicit, fmt.Errorf("%w: service %s: requested IP %s is %s, not one of the Service's families %v", ErrBadAnnotation, key, ip, famNames[fi], fams)
		}
		explicit[fi] = ip
	}
	return fams, explicit, nil
}

// Assign gives key (namespace/name) its addresses, one per family of req.Families
// (PreferDualStack: as many as available, at least one).
//
// Guarantees:
//   - The IPs in current (the Service's status, the record of what it holds), or
//     else for a family current lacks what key holds in the allocator, are kept
//     while they are still valid for req: of a requested family, equal to the
//     requested IP if any, in the named pool if any, in a pool that admits the
//     Service, and sharable with the other holders. An IP that is in no pool any
//     more is kept, and reported in OutOfPool.
//   - A Service never loses an IP of its status but by its own request: when req
//     still allows that IP but the allocator has it held by other Services only
//     (not by key), the error wraps ErrHeldElsewhere and nothing changes.
//   - Calling again with the same request returns the same IPs.
//   - Otherwise: requested IPs, else an IP of the same pool as a kept/requested
//     IP, else the first pool (named, or auto-assign pools that admit the Service by
//     Priority then name) that offers every missing family. With a sharing key, an
//     IP of that pool already carrying the key (lowest first) is preferred when
//     compatible; else the lowest free address.
//   - A changed request moves the Service atomically: on success the old IPs are
//     released; on error nothing changes and key keeps what it held.
func (a *Allocator) Assign(key string, req Request, current []netip.Addr) (Assignment, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	fams, explicit, err := normalize(key, &req)
	if err != nil {
		return Assignment{}, err
	}
	if req.Pool != "" {
		// A named pool must exist and admit the Service, even when the Service
		// keeps an IP that is out of every pool.
		if _, err := a.candidates(key, &req); err != nil {
			return Assignment{}, err
		}
	}
	sa := attrsOf(&req)
	old := a.svcs[key]

	// The status is the record of what the Service holds: its IPs come first.
	var cand, inStatus [2]netip.Addr
	for _, ip := range current {
		if ip.IsValid() && ip.Zone() == "" {
			ip = ip.Unmap()
			if fi := ipFamIndex(ip); !inStatus[fi].IsValid() {
				inStatus[fi] = ip
			}
		}
	}
	cand = inStatus
	if old != nil {
		for _, ip := range old.ips {
			if fi := ipFamIndex(ip); !cand[fi].IsValid() {
				cand[fi] = ip
			}
		}
	}

	var plan [2]planned
	var anchor *pool
	for _, f := range fams {
		fi := famIndex(f)
		if ex := explicit[fi]; ex.IsValid() {
			rng := a.rangeOf(ex)
			if rng == nil {
				if ex != cand[fi] {
					return Assignment{}, fmt.Errorf("%w: service %s asks for %s, which no address pool contains (or it is an .0/.255 address of an avoidBuggyIPs pool): ask for an IP of a pool (%s) or remove the annotation %s / spec.loadBalancerIP", ErrNotInPool, key, ex, a.poolList(), AnnotationLoadBalancerIPs)
				}
			} else {
				if req.Pool != "" && rng.pool.name != req.Pool {
					return Assignment{}, fmt.Errorf("%w: service %s asks for %s, which is in pool %q, not in pool %q named by annotation %s: make them agree", ErrNotInPool, key, ex, rng.pool.name, req.Pool, AnnotationAddressPool)
				}
				if !rng.pool.admits(&req) {
					return Assignment{}, fmt.Errorf("%w: service %s asks for %s of pool %q, which is restricted to %s: ask for an IP of a pool that admits the Service, or change the pool's restrictions", ErrNotAllowed, key, ex, rng.pool.name, rng.pool.restriction())
				}
				if anchor == nil {
					anchor = rng.pool
				}
			}
			if u := a.ips[ex]; u != nil {
				if err := compatible(u, ex, key, &sa); err != nil {
					if ex == inStatus[fi] && !holds(u, key) {
						return Assignment{}, heldElsewhere(key, ex, err)
					}
					return Assignment{}, fmt.Errorf("service %s: %w", key, err)
				}
			}
			plan[fi] = planned{ip: ex, rng: rng, ok: true}
			continue
		}
		if c := cand[fi]; c.IsValid() {
			rng, allowed := a.allowedByRequest(c, &req)
			if allowed {
				if u := a.ips[c]; u != nil {
					if err := compatible(u, c, key, &sa); err != nil {
						if c == inStatus[fi] && !holds(u, key) {
							return Assignment{}, heldElsewhere(key, c, err)
						}
						// Its own changed request (sharing key, ports, policy) no
						// longer fits the other holders: it moves.
						continue
					}
				}
				plan[fi] = planned{ip: c, rng: rng, ok: true}
				if rng != nil && anchor == nil {
					anchor = rng.pool
				}
			}
		}
	}

	var mbuf [2]int
	missing := func() []int {
		m := mbuf[:0]
		for _, f := range fams {
			if !plan[famIndex(f)].ok {
				m = append(m, famIndex(f))
			}
		}
		return m
	}
	if anchor != nil {
		for _, fi := range missing() {
			if ip, rng, ok := a.supply(anchor, fi, key, &sa); ok {
				plan[fi] = planned{ip: ip, rng: rng, ok: true}
			}
		}
	}
	if m := missing(); len(m) > 0 {
		hasPlan := len(m) < len(fams)
		switch {
		case hasPlan && !req.RequireAll:
			// PreferDualStack keeps what it has; the other family comes only from
			// the same pool (MetalLB).
		case hasPlan:
			cands, err := a.candidates(key, &req)
			if err != nil {
				return Assignment{}, err
			}
			for _, fi := range m {
				if err := a.search(key, cands, []int{fi}, &sa, &req, &plan); err != nil {
					return Assignment{}, err
				}
			}
		default:
			cands, err := a.candidates(key, &req)
			if err != nil {
				return Assignment{}, err
			}
			err = a.search(key, cands, m, &sa, &req, &plan)
			if err != nil && !req.RequireAll && len(m) == 2 {
				// PreferDualStack: the first family alone, else the second.
				if err = a.search(key, cands, m[:1], &sa, &req, &plan); err != nil {
					err = a.search(key, cands, m[1:], &sa, &req, &plan)
				}
			}
			if err != nil {
				return Assignment{}, err
			}
		}
	}

	var outBuf [2]planned
	out := outBuf[:0]
	for _, f := range fams {
		if p := plan[famIndex(f)]; p.ok {
			out = append(out, p)
		}
	}
	s := a.commit(key, old, out, sa)
	return a.assignment(s), nil
}

// allowedByRequest reports whether req lets a Service keep c (in the named pool if
// any, in a pool that admits it, or in no pool at all), and c's range.
func (a *Allocator) allowedByRequest(c netip.Addr, req *Request) (*ipRange, bool) {
	rng := a.rangeOf(c)
	if rng != nil && ((req.Pool != "" && rng.pool.name != req.Pool) || !rng.pool.admits(req)) {
		return nil, false
	}
	return rng, true
}

// holds reports whether key is one of u's holders.
func holds(u *ipUse, key string) bool {
	return slices.ContainsFunc(u.holders, func(h *svcAlloc) bool { return h.key == key })
}

// HeldElsewhereError is Assign's error (wrapping ErrHeldElsewhere) for an IP in the
// Service's status that the allocator has held by another Service.
type HeldElsewhereError struct {
	Key string
	IP  netip.Addr
	Why error
}

func (e *HeldElsewhereError) Error() string {
	return fmt.Sprintf("%v: service %s has %s in its status, but IPAM has it held by another Service (%v)", ErrHeldElsewhere, e.Key, e.IP, e.Why)
}

// Unwrap makes the error match ErrHeldElsewhere.
func (e *HeldElsewhereError) Unwrap() error { return ErrHeldElsewhere }

func heldElsewhere(key string, ip netip.Addr, why error) error {
	return &HeldElsewhereError{Key: key, IP: ip, Why: why}
}

// InUse reports whether any Service (or reservation) holds ip.
func (a *Allocator) InUse(ip netip.Addr) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	u := a.ips[ip.Unmap()]
	return u != nil && len(u.holders) > 0
}

// candidates returns the pools key may auto-assign from: the named pool, or the
// auto-assign pools that admit it.
func (a *Allocator) candidates(key string, req *Request) ([]*pool, error) {
	if req.Pool != "" {
		p := a.byName[req.Pool]
		if p == nil {
			return nil, fmt.Errorf("%w: service %s names pool %q in annotation %s, which is not configured: use one of %s", ErrUnknownPool, key, req.Pool, AnnotationAddressPool, a.poolList())
		}
		if !p.admits(req) {
			return nil, fmt.Errorf("%w: service %s names pool %q, which is restricted to %s: name a pool that admits the Service, or change the pool's restrictions", ErrNotAllowed, key, p.name, p.restriction())
		}
		return []*pool{p}, nil
	}
	out := a.auto
	if !a.autoOpen {
		out = nil
		for _, p := range a.auto {
			if p.admits(req) {
				out = append(out, p)
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no auto-assign pool admits service %s (namespace %q): name a pool with annotation %s, or add an auto-assign pool whose namespaces/serviceSelector admit it", ErrNotAllowed, key, req.Namespace, AnnotationAddressPool)
	}
	return out, nil
}

// search fills plan, from the first pool of cands that offers all of fams, with
// one address per family. On error plan is unchanged.
func (a *Allocator) search(key string, cands []*pool, fams []int, sa *shareAttrs, req *Request, plan *[2]planned) error {
	offered := false
next:
	for _, p := range cands {
		for _, fi := range fams {
			if len(p.ranges[fi]) == 0 {
				continue next
			}
		}
		offered = true
		var got [2]planned
		for _, fi := range fams {
			ip, rng, ok := a.supply(p, fi, key, sa)
			if !ok {
				continue next
			}
			got[fi] = planned{ip: ip, rng: rng, ok: true}
		}
		for _, fi := range fams {
			plan[fi] = got[fi]
		}
		return nil
	}
	names := make([]string, len(fams))
	for i, fi := range fams {
		names[i] = string(famNames[fi])
	}
	want := strings.Join(names, " and ")
	var which string
	if req.Pool != "" {
		which = fmt.Sprintf("pool %q", req.Pool)
	} else {
		ps := make([]string, len(cands))
		for i, p := range cands {
			ps[i] = p.name
		}
		which = fmt.Sprintf("the auto-assign pools admitting it (%s)", strings.Join(ps, ", "))
	}
	if !offered {
		hint := "add " + want + " addresses to a pool"
		if len(fams) == 2 {
			hint = "a dual-stack Service needs one pool with both IPv4 and IPv6 addresses: add them to one pool, or use ipFamilyPolicy SingleStack or PreferDualStack"
		}
		return fmt.Errorf("%w: service %s needs %s, but none of %s offers %s: %s", ErrFamilyUnavailable, key, want, which, want, hint)
	}
	return fmt.Errorf("%w: service %s needs %s, but every address of %s offering it is in use: add addresses to the pool, delete unused LoadBalancer Services, or share IPs with %s", ErrPoolExhausted, key, want, which, AnnotationAllowSharedIP)
}

// supply picks an address of family fi in p for key, without taking it.
func (a *Allocator) supply(p *pool, fi int, key string, sa *shareAttrs) (netip.Addr, *ipRange, bool) {
	if sa.sharing != "" {
		var best netip.Addr
		var bestUse *ipUse
		for ip := range a.shared[sa.sharing] {
			u := a.ips[ip]
			if u.rng == nil || u.rng.pool != p || ipFamIndex(ip) != fi || (best.IsValid() && best.Less(ip)) {
				continue
			}
			if compatible(u, ip, key, sa) == nil {
				best, bestUse = ip, u
			}
		}
		if bestUse != nil {
			return best, bestUse.rng, true
		}
	}
	for _, r := range p.ranges[fi] {
		if ip, ok := a.lowestFree(r); ok {
			return ip, r, true
		}
	}
	return netip.Addr{}, nil, false
}

// commit makes key hold exactly out.
func (a *Allocator) commit(key string, old *svcAlloc, out []planned, sa shareAttrs) *svcAlloc {
	s := old
	if s == nil {
		s = a.newSvc(key)
		a.svcs[key] = s
	} else {
		for _, ip := range old.ips {
			keep := false
			for _, p := range out {
				keep = keep || p.ip == ip
			}
			if !keep {
				a.dropHolder(ip, s)
			}
		}
	}
	ports := s.share.ports
	if !slices.Equal(ports, sa.ports) {
		ports = slices.Clone(sa.ports)
	}
	s.share = sa
	s.share.ports = ports
	s.ips = s.ips[:0]
	for _, p := range out {
		s.ips = append(s.ips, p.ip)
		u := a.ips[p.ip]
		if u == nil {
			u = a.newUse(p.rng)
			a.ips[p.ip] = u
			if p.rng != nil {
				u.stale = p.rng.take(p.ip)
				p.rng.pool.used[p.rng.family]++
			} else {
				a.outOfPool++
			}
		}
		if !slices.Contains(u.holders, s) {
			u.holders = append(u.holders, s)
		}
		if len(u.holders) == 1 {
			a.setSharing(u, p.ip, sa.sharing)
			u.local, u.backend = sa.local, sa.backend
		}
	}
	return s
}

// setSharing sets ip's sharing key and keeps the key -> IPs index in step.
func (a *Allocator) setSharing(u *ipUse, ip netip.Addr, key string) {
	if u.sharing != key && u.sharing != "" {
		if m := a.shared[u.sharing]; m != nil {
			delete(m, ip)
			if len(m) == 0 {
				delete(a.shared, u.sharing)
			}
		}
	}
	u.sharing = key
	if key != "" {
		m := a.shared[key]
		if m == nil {
			m = map[netip.Addr]struct{}{}
			a.shared[key] = m
		}
		m[ip] = struct{}{}
	}
}

// dropHolder removes s from ip's holders and frees ip when s was the last.
func (a *Allocator) dropHolder(ip netip.Addr, s *svcAlloc) {
	u := a.ips[ip]
	if u == nil {
		return
	}
	if i := slices.Index(u.holders, s); i >= 0 {
		u.holders = slices.Delete(u.holders, i, i+1)
	}
	if len(u.holders) > 0 {
		return
	}
	a.setSharing(u, ip, "")
	delete(a.ips, ip)
	if u.rng != nil {
		u.rng.free(ip, u.stale)
		u.rng.pool.used[u.rng.family]--
	} else {
		a.outOfPool--
	}
	if len(a.freeUses) < maxFree { // no reference to u is left: it is in no map or holder list
		*u = ipUse{}
		a.freeUses = append(a.freeUses, u)
	}
}

// maxFree bounds each free list: a mass deletion does not pin memory for long.
const maxFree = 1024

func (a *Allocator) newSvc(key string) *svcAlloc {
	var s *svcAlloc
	if n := len(a.freeSvcs); n > 0 {
		s, a.freeSvcs = a.freeSvcs[n-1], a.freeSvcs[:n-1]
	} else {
		s = &svcAlloc{}
	}
	s.key = key
	s.ips = s.ipsBuf[:0]
	return s
}

func (a *Allocator) newUse(rng *ipRange) *ipUse {
	var u *ipUse
	if n := len(a.freeUses); n > 0 {
		u, a.freeUses = a.freeUses[n-1], a.freeUses[:n-1]
	} else {
		u = &ipUse{}
	}
	u.rng = rng
	u.holders = u.inline[:0]
	return u
}

func (a *Allocator) assignment(s *svcAlloc) Assignment {
	as := Assignment{IPs: slices.Clone(s.ips), Pools: make([]string, len(s.ips))}
	for i, ip := range s.ips {
		if u := a.ips[ip]; u.rng != nil {
			as.Pools[i] = u.rng.pool.name
		} else {
			as.OutOfPool = append(as.OutOfPool, ip)
		}
	}
	return as
}

func (a *Allocator) poolList() string {
	names := make([]string, len(a.pools))
	for i, p := range a.pools {
		names[i] = p.name
	}
	return strings.Join(names, ", ")
}

// Prime records that key holds current (the IPs in its status), before any
// Assign after a (re)start, so no IP in use is handed out to another Service. It
// keeps every current IP (the first of each family) that is not held by another
// Service incompatibly (same rules as sharing), whether or not a pool still
// contains it or the request still wants it: a later Assign decides that. It
// allocates nothing. req needs only its sharing fields (SharingKey, Ports, Local,
// Selector), so the partial Request ParseService returns with an error will do.
// If key already holds addresses Prime changes nothing. The error wraps
// ErrIPInUse or ErrSharingConflict for each IP it could not keep; Assigned tells
// what it kept.
//
// Priming every Service in any order never lets two Services hold one IP
// incompatibly; the first primed wins a conflict (prime in creation order).
func (a *Allocator) Prime(key string, req Request, current []netip.Addr) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.svcs[key] != nil {
		return nil
	}
	sa := attrsOf(&req)
	var out []planned
	var errs []error
	var seen [2]bool
	for _, ip := range current {
		if !ip.IsValid() || ip.Zone() != "" {
			continue
		}
		ip = ip.Unmap()
		fi := ipFamIndex(ip)
		if seen[fi] {
			continue
		}
		if u := a.ips[ip]; u != nil {
			if err := compatible(u, ip, key, &sa); err != nil {
				errs = append(errs, fmt.Errorf("service %s: current IP %s not kept: %w", key, ip, err))
				continue
			}
		}
		seen[fi] = true
		out = append(out, planned{ip: ip, rng: a.rangeOf(ip)})
	}
	if len(out) > 0 {
		a.commit(key, nil, out, sa)
	}
	return errors.Join(errs...)
}

// SetPools replaces the pools (validated as for New) and keeps every address held:
// each Service keeps what it holds, in a pool of the new set or, as Prime keeps
// them, in none. On New's error nothing changes. Pools returned by PoolOf before
// stay as they were.
func (a *Allocator) SetPools(pools []config.AddressPool) error {
	return a.setPools(pools, false)
}

// ErrWouldStrand is SetPoolsKeeping's error: the new pools leave out an address a
// Service holds in a pool now.
var ErrWouldStrand = errors.New("the new pools leave out addresses Services hold")

// SetPoolsKeeping is SetPools, but refuses (ErrWouldStrand, nothing changes) when an
// address held in a pool now would be in none: checked and applied atomically with
// Assign, so no address handed out meanwhile is stranded.
func (a *Allocator) SetPoolsKeeping(pools []config.AddressPool) error {
	return a.setPools(pools, true)
}

// Addresses returns every address held (in a pool or not), in no order.
func (a *Allocator) Addresses() []netip.Addr {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]netip.Addr, 0, len(a.ips))
	for ip := range a.ips {
		out = append(out, ip)
	}
	return out
}

func (a *Allocator) setPools(pools []config.AddressPool, keep bool) error {
	n, err := New(pools)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if keep {
		var stranded []string
		for ip, u := range a.ips {
			if u.rng != nil && n.rangeOf(ip) == nil {
				stranded = append(stranded, ip.String())
			}
		}
		if len(stranded) > 0 {
			slices.Sort(stranded)
			return fmt.Errorf("%w: %s", ErrWouldStrand, strings.Join(stranded, ", "))
		}
	}
	// The holders coexist already (compatible sharing), so any order keeps them all.
	for key, s := range a.svcs {
		out := make([]planned, 0, len(s.ips))
		for _, ip := range s.ips {
			out = append(out, planned{ip: ip, rng: n.rangeOf(ip)})
		}
		n.commit(key, nil, out, s.share)
	}
	a.pools, a.byName, a.ranges = n.pools, n.byName, n.ranges
	a.svcs, a.ips, a.shared, a.outOfPool = n.svcs, n.ips, n.shared, n.outOfPool
	a.auto, a.autoOpen = n.auto, n.autoOpen
	a.freeSvcs, a.freeUses = nil, nil
	return nil
}

// Reset releases everything, as if the Allocator were new: Prime it again before the
// next Assign.
func (a *Allocator) Reset() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for key := range a.svcs {
		a.release(key)
	}
}

// Release frees key's IPs; a shared IP is freed when its last holder leaves.
// Releasing an unknown key does nothing.
func (a *Allocator) Release(key string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.release(key)
}

func (a *Allocator) release(key string) {
	s := a.svcs[key]
	if s == nil {
		return
	}
	for _, ip := range s.ips {
		a.dropHolder(ip, s)
	}
	delete(a.svcs, key)
	if len(a.freeSvcs) < maxFree { // dropHolder removed s from every holder list
		*s = svcAlloc{}
		a.freeSvcs = append(a.freeSvcs, s)
	}
}

// Assigned returns what key holds.
func (a *Allocator) Assigned(key string) (Assignment, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.svcs[key]
	if s == nil {
		return Assignment{}, false
	}
	return a.assignment(s), true
}

// PoolOf returns the pool containing ip (for its communities). The pool is the
// allocator's copy: do not modify it.
func (a *Allocator) PoolOf(ip netip.Addr) (*config.AddressPool, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := a.rangeOf(ip.Unmap())
	if r == nil {
		return nil, false
	}
	return &r.pool.cfg, true
}

// PoolServices returns, per pool, how many Services hold at least one of its
// addresses. It is O(Services): for status reports, not the allocation path.
func (a *Allocator) PoolServices() map[string]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string]int, len(a.pools))
	for _, p := range a.pools {
		out[p.name] = 0
	}
	for _, s := range a.svcs {
		counted := ""
		for _, ip := range s.ips {
			if u := a.ips[ip]; u != nil && u.rng != nil && u.rng.pool.name != counted {
				counted = u.rng.pool.name // a dual-stack Service counts once per pool
				out[counted]++
			}
		}
	}
	return out
}

// Usage returns every pool's size and use per family it offers, in pool order
// (Priority, then name).
func (a *Allocator) Usage() []PoolUsage {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []PoolUsage
	for _, p := range a.pools {
		for fi := range p.ranges {
			if len(p.ranges[fi]) > 0 {
				out = append(out, PoolUsage{Pool: p.name, Family: famNames[fi], Size: p.size[fi], Used: p.used[fi]})
			}
		}
	}
	return out
}

// OutOfPool returns how many addresses in use no pool contains.
func (a *Allocator) OutOfPool() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.outOfPool
}
