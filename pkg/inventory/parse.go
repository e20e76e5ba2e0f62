package inventory

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"regexp"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/baremetal-ccm/baremetal-ccm/internal/strictyaml"
	"github.com/baremetal-ccm/baremetal-ccm/pkg/config"
)

// LabelPrefix is the prefix given to unprefixed inventory label keys.
const LabelPrefix = "baremetal-ccm.io/"

// LabelRack is the Node label that carries a host's rack.
const LabelRack = LabelPrefix + "rack"

// ErrInvalid is wrapped by every error Parse returns for a document that cannot be
// used: undecodable, unknown fields, or failed validation.
var ErrInvalid = errors.New("invalid inventory")

var (
	// systemIDRE and systemPathRE accept a Redfish ComputerSystem's Id and its URI.
	systemIDRE   = regexp.MustCompile(`^[A-Za-z0-9._~:@!$&'()*+,;=-]{1,128}$`)
	systemPathRE = regexp.MustCompile(`^/redfish/v1/Systems/[A-Za-z0-9._~:@!$&'()*+,;=-]{1,128}$`)
	uuidRE       = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)
	reservedRE   = regexp.MustCompile(`(^|\.)(kubernetes|k8s)\.io/`)
)

// ParseOptions are the CloudConfig's rules an inventory must follow beyond its own
// validity: whoever writes the inventory must not be able to make the CCM read a file
// outside CredentialsDir (and send its content to a BMC or router of their choice),
// nor turn TLS verification off unless the CloudConfig allows it.
type ParseOptions struct {
	// CredentialsDir: every host's bmc.credentialsFile and every rack's
	// bgpPeers[].passwordFile must lie under it once cleaned. "": no restriction.
	CredentialsDir string
	// AllowInsecureSkipVerify lets hosts set bmc.insecureSkipVerify.
	AllowInsecureSkipVerify bool
	// AllowPlainHTTP lets hosts set bmc.plainHTTP (an http:// Redfish address).
	AllowPlainHTTP bool
}

// ParseOptionsFor returns the inventory rules of a defaulted, validated CloudConfig.
func ParseOptionsFor(cfg *config.CloudConfig) ParseOptions {
	return ParseOptions{
		CredentialsDir:          cfg.Inventory.CredentialsDir,
		AllowInsecureSkipVerify: cfg.Inventory.AllowInsecureSkipVerify,
		AllowPlainHTTP:          cfg.Inventory.AllowPlainHTTP,
	}
}

// Parse decodes and validates an Inventory document (YAML or JSON) without the
// CloudConfig's rules: ParseWith(data, ParseOptions{}).
func Parse(data []byte) (*View, error) {
	return ParseWith(data, ParseOptions{})
}

// ParseWith decodes and validates an Inventory document (YAML or JSON) under opts and
// returns its indexed View, whose Digest is that of data. The error wraps ErrInvalid
// and lists every problem, each with its field path.
func ParseWith(data []byte, opts ParseOptions) (*View, error) {
	doc := &Document{}
	fieldErrs, err := strictyaml.Unmarshal(data, doc)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if errs := validate(doc, opts); len(errs) > 0 || len(fieldErrs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, errors.Join(append(fieldErrs, errs.ToAggregate())...))
	}
	return newView(doc, Digest(data)), nil
}

// Digest returns the short content digest that identifies an inventory document in
// events, logs, metrics and acknowledgements.
func Digest(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:8])
}

// Validate returns every problem in doc, without the CloudConfig's rules. It
// normalizes doc in place (lower-case UUIDs, canonical IPs, default state) so that a
// valid document can be indexed directly.
func Validate(doc *Document) field.ErrorList {
	return validate(doc, ParseOptions{})
}

// validate is Validate under opts.
func validate(doc *Document, opts ParseOptions) field.ErrorList {
	var errs field.ErrorList
	if doc.APIVersion != APIVersion {
		errs = append(errs, field.NotSupported(field.NewPath("apiVersion"), doc.APIVersion, []string{APIVersion}))
	}
	if doc.Kind != Kind {
		errs = append(errs, field.NotSupported(field.NewPath("kind"), doc.Kind, []string{Kind}))
	}
	names := map[string]*field.Path{} // host names and hostnames
	uuids := map[string]*field.Path{}
	ips := map[netip.Addr]*field.Path{}
	routerIDs := map[string]*field.Path{}
	claim := func(seen map[string]*field.Path, key string, p *field.Path, what string) {
		if prev, ok := seen[key]; ok {
			errs = append(errs, field.Duplicate(p, fmt.Sprintf("%s %q is already used at %s", what, key, prev)))
			return
		}
		seen[key] = p
	}
	for i := range doc.Hosts {
		h := &doc.Hosts[i]
		hp := field.NewPath("hosts").Index(i)
		if h.Name == "" {
			errs = append(errs, field.Required(hp.Child("name"), "every host needs a unique name"))
		} else {
			for _, msg := range validation.IsDNS1123Subdomain(h.Name) {
				errs = append(errs, field.Invalid(hp.Child("name"), h.Name, msg))
			}
			claim(names, h.Name, hp.Child("name"), "name")
		}
		for j, n := range h.Hostnames {
			p := hp.Child("hostnames").Index(j)
			n = strings.ToLower(n)
			h.Hostnames[j] = n
			for _, msg := range validation.IsDNS1123Subdomain(n) {
				errs = append(errs, field.Invalid(p, n, msg))
			}
			if n != h.Name {
				claim(names, n, p, "name")
			}
		}
		if h.SystemUUID != "" {
			p := hp.Child("systemUUID")
			if !uuidRE.MatchString(h.SystemUUID) {
				errs = append(errs, field.Invalid(p, h.SystemUUID, "must be a UUID like 4c4c4544-0042-3510-8052-b4c04f4e4d32 (as in /sys/class/dmi/id/product_uuid)"))
			}
			h.SystemUUID = strings.ToLower(h.SystemUUID)
			if IsPlaceholderUUID(h.SystemUUID) {
				errs = append(errs, field.Invalid(p, h.SystemUUID, "is a placeholder that firmware reports for machines without a UUID of their own, so it identifies no machine: leave systemUUID empty for this host"))
			}
			// The same machine in another byte order is the same UUID (see SameSystemUUID).
			for _, form := range UUIDForms(h.SystemUUID) {
				if prev, ok := uuids[form]; ok && prev != p {
					errs = append(errs, field.Duplicate(p, fmt.Sprintf("systemUUID %q is already used at %s (in another byte order)", h.SystemUUID, prev)))
					break
				}
				uuids[form] = p
			}
		}
		for j := range h.Addresses {
			a := &h.Addresses[j]
			p := hp.Child("addresses").Index(j)
			switch a.Type {
			case v1.NodeInternalIP, v1.NodeExternalIP:
				ip, err := netip.ParseAddr(a.Address)
				if err != nil || ip.Zone() != "" || ip.IsUnspecified() {
					errs = append(errs, field.Invalid(p.Child("address"), a.Address, "must be an IPv4 or IPv6 address"))
					continue
				}
				ip = ip.Unmap()
				a.Address = ip.String()
				if prev, ok := ips[ip]; ok {
					errs = append(errs, field.Duplicate(p.Child("address"), fmt.Sprintf("address %s is already used at %s", ip, prev)))
				} else {
					ips[ip] = p.Child("address")
				}
			case v1.NodeHostName, v1.NodeInternalDNS, v1.NodeExternalDNS:
				for _, msg := range validation.IsDNS1123Subdomain(a.Address) {
					errs = append(errs, field.Invalid(p.Child("address"), a.Address, msg))
				}
			default:
				errs = append(errs, field.NotSupported(p.Child("type"), a.Type, []string{
					string(v1.NodeInternalIP), string(v1.NodeExternalIP), string(v1.NodeHostName),
					string(v1.NodeInternalDNS), string(v1.NodeExternalDNS)}))
			}
		}
		if h.BGPRouterID != "" {
			p := hp.Child("bgpRouterID")
			if ip, err := netip.ParseAddr(h.BGPRouterID); err != nil || !ip.Is4() || ip.IsUnspecified() {
				errs = append(errs, field.Invalid(p, h.BGPRouterID, "must be an IPv4 address such as 10.0.0.1, unique per host (leave empty to use the host's first IPv4 InternalIP)"))
			} else {
				h.BGPRouterID = ip.String()
				claim(routerIDs, h.BGPRouterID, p, "bgpRouterID")
			}
		}
		for _, lv := range []struct {
			name, value string
		}{{"instanceType", h.InstanceType}, {"zone", h.Zone}, {"region", h.Region}, {"rack", h.Rack}} {
			for _, msg := range validation.IsValidLabelValue(lv.value) {
				errs = append(errs, field.Invalid(hp.Child(lv.name), lv.value, "becomes a Node label value: "+msg))
			}
		}
		for k, v := range h.Labels {
			p := hp.Child("labels").Key(k)
			if reservedRE.MatchString(k) {
				errs = append(errs, field.Invalid(p, k, "keys under kubernetes.io and k8s.io are reserved and would be dropped by the cloud-node controller; use an unprefixed key (published as "+LabelPrefix+"<key>) or your own prefix"))
				continue
			}
			for _, msg := range validation.IsQualifiedName(NodeLabelKey(k)) {
				errs = append(errs, field.Invalid(p, k, "not a valid label key: "+msg))
			}
			for _, msg := range validation.IsValidLabelValue(v) {
				errs = append(errs, field.Invalid(p, v, "not a valid label value: "+msg))
			}
		}
		switch h.State {
		case "":
			h.State = StateActive
		case StateActive, StateMaintenance, StateDecommissioned:
		default:
			errs = append(errs, field.NotSupported(hp.Child("state"), h.State, []string{string(StateActive), string(StateMaintenance), string(StateDecommissioned)}))
		}
		if h.BMC != nil {
			errs = append(errs, validateBMC(h.BMC, hp.Child("bmc"), opts)...)
		}
	}
	rp := field.NewPath("racks")
	// A router ID must not be another host's default one (its first IPv4 InternalIP).
	for rid, p := range routerIDs {
		ip, _ := netip.ParseAddr(rid)
		if prev, ok := ips[ip]; ok && !sameHost(prev, p) {
			errs = append(errs, field.Duplicate(p, fmt.Sprintf("bgpRouterID %s is the address of another host at %s, which may be that host's default router ID", rid, prev)))
		}
	}
	errs = append(errs, validateRacks(doc.Racks, rp)...)
	for i := range doc.Racks {
		for j, peer := range doc.Racks[i].BGPPeers {
			errs = append(errs, validateCredentialsPath(peer.PasswordFile, rp.Index(i).Child("bgpPeers").Index(j).Child("passwordFile"), opts)...)
		}
	}
	return errs
}

func validateBMC(b *BMC, p *field.Path, opts ParseOptions) field.ErrorList {
	var errs field.ErrorList
	switch b.Protocol {
	case ProtocolRedfish, ProtocolIPMI:
	case "":
		errs = append(errs, field.Required(p.Child("protocol"), "redfish or ipmi"))
	default:
		errs = append(errs, field.NotSupported(p.Child("protocol"), b.Protocol, []string{ProtocolRedfish, ProtocolIPMI}))
	}
	if b.Address == "" {
		errs = append(errs, field.Required(p.Child("address"), "host name, IP, or (redfish) https:// URL of the BMC"))
	} else if strings.Contains(b.Address, "@") {
		errs = append(errs, field.Invalid(p.Child("address"), "(redacted)", "must not carry credentials; use credentialsFile"))
	} else if strings.Contains(b.Address, "://") && b.Protocol == ProtocolIPMI {
		errs = append(errs, field.Invalid(p.Child("address"), b.Address, "an IPMI BMC address is a host name or IP, not a URL"))
	} else if scheme, _, ok := strings.Cut(b.Address, "://"); ok {
		switch strings.ToLower(scheme) {
		case "https":
		case "http":
			switch {
			case !b.PlainHTTP:
				errs = append(errs, field.Invalid(p.Child("address"), b.Address, "http:// sends the BMC password in clear text: use https://, or set bmc.plainHTTP: true to accept that (the CloudConfig must allow it with inventory.allowPlainHTTP)"))
			case !opts.AllowPlainHTTP:
				errs = append(errs, field.Forbidden(p.Child("plainHTTP"), "the CloudConfig does not allow plain-HTTP BMCs: use https://, or set inventory.allowPlainHTTP: true in the CloudConfig"))
			}
		default:
			errs = append(errs, field.NotSupported(p.Child("address"), scheme+"://", []string{"https://", "http:// (with plainHTTP)"}))
		}
	}
	if b.PlainHTTP && !strings.HasPrefix(strings.ToLower(b.Address), "http://") {
		errs = append(errs, field.Invalid(p.Child("plainHTTP"), true, "applies to an http:// address only"))
	}
	if b.Port < 0 || b.Port > 65535 {
		errs = append(errs, field.Invalid(p.Child("port"), b.Port, "must be between 1 and 65535"))
	}
	switch {
	case b.CredentialsFile == "" && b.CredentialsSecret == nil:
		errs = append(errs, field.Required(p.Child("credentialsFile"), "path of a file holding the BMC username and password, or credentialsSecret (credentials are never inline)"))
	case b.CredentialsFile != "" && b.CredentialsSecret != nil:
		errs = append(errs, field.Invalid(p.Child("credentialsSecret"), "(redacted)", "set exactly one of credentialsFile and credentialsSecret"))
	case b.CredentialsFile != "" && !strings.HasPrefix(b.CredentialsFile, "/"):
		errs = append(errs, field.Invalid(p.Child("credentialsFile"), b.CredentialsFile, "must be an absolute path"))
	case b.CredentialsFile != "":
		errs = append(errs, validateCredentialsPath(b.CredentialsFile, p.Child("credentialsFile"), opts)...)
	case b.CredentialsSecret != nil:
		sp := p.Child("credentialsSecret")
		for _, f := range []struct {
			name, value string
			check       func(string) []string
		}{{"namespace", b.CredentialsSecret.Namespace, validation.IsDNS1123Label}, {"name", b.CredentialsSecret.Name, validation.IsDNS1123Subdomain}} {
			if f.value == "" {
				errs = append(errs, field.Required(sp.Child(f.name), "the Secret (keys username and password) holding the BMC credentials"))
				continue
			}
			for _, msg := range f.check(f.value) {
				errs = append(errs, field.Invalid(sp.Child(f.name), f.value, msg))
			}
		}
	}
	if b.CAFile != "" && !strings.HasPrefix(b.CAFile, "/") {
		errs = append(errs, field.Invalid(p.Child("caFile"), b.CAFile, "must be an absolute path"))
	}
	if b.System != "" {
		switch {
		case b.Protocol != ProtocolRedfish:
			errs = append(errs, field.Invalid(p.Child("system"), b.System, "applies to redfish only"))
		case strings.HasPrefix(b.System, "/") && !systemPathRE.MatchString(b.System):
			errs = append(errs, field.Invalid(p.Child("system"), b.System, "must be a ComputerSystem's Id (Blade3) or its path (/redfish/v1/Systems/Blade3)"))
		case !strings.HasPrefix(b.System, "/") && !systemIDRE.MatchString(b.System):
			errs = append(errs, field.Invalid(p.Child("system"), b.System, "must be a ComputerSystem's Id (Blade3) or its path (/redfish/v1/Systems/Blade3)"))
		}
	}
	if b.Protocol == ProtocolIPMI && (b.InsecureSkipVerify || b.CAFile != "") {
		errs = append(errs, field.Invalid(p.Child("insecureSkipVerify"), b.InsecureSkipVerify, "caFile and insecureSkipVerify apply to redfish (TLS) only"))
	} else if b.InsecureSkipVerify && !opts.AllowInsecureSkipVerify {
		errs = append(errs, field.Forbidden(p.Child("insecureSkipVerify"), "the CloudConfig does not allow skipping TLS verification: give the BMC's CA in caFile (or the CloudConfig's bmc.caFile), or set inventory.allowInsecureSkipVerify: true in the CloudConfig"))
	}
	return errs
}

// validateCredentialsPath checks that an absolute path (a BMC credentials file, a BGP
// password file) lies under opts.CredentialsDir once both are cleaned, so that
// "/etc/baremetal-ccm/bmc/../../shadow" is refused. Empty paths, relative paths
// (reported by the field's own validation) and an unset CredentialsDir pass. Symlinks
// are not resolved here: the file may not exist yet when the inventory is parsed.
func validateCredentialsPath(path string, p *field.Path, opts ParseOptions) field.ErrorList {
	if opts.CredentialsDir == "" || path == "" || !filepath.IsAbs(path) {
		return nil
	}
	dir, clean := filepath.Clean(opts.CredentialsDir), filepath.Clean(path)
	rel, err := filepath.Rel(dir, clean)
	if err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return nil
	}
	where := ""
	if clean != path {
		where = " (it resolves to " + clean + ")"
	}
	return field.ErrorList{field.Invalid(p, path, fmt.Sprintf(
		"must be a file under inventory.credentialsDir %s%s: move the file under %s or set inventory.credentialsDir in the CloudConfig", dir, where, dir))}
}

// NodeLabelKey returns the Node label key for an inventory label key: unprefixed keys
// get LabelPrefix.
func NodeLabelKey(k string) string {
	if strings.Contains(k, "/") {
		return k
	}
	return LabelPrefix + k
}

// sameHost reports whether two paths are under the same hosts[i].
func sameHost(a, b *field.Path) bool {
	host := func(p *field.Path) string {
		s := p.String()
		if i := strings.Index(s, "]"); i >= 0 {
			return s[:i+1]
		}
		return s
	}
	return host(a) == host(b)
}
