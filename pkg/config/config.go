package config

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/baremetal-ccm/baremetal-ccm/internal/strictyaml"
)

// Defaults, in one place.
const (
	DefaultFilePollInterval  = 5 * time.Second
	DefaultHTTPPollInterval  = 30 * time.Second
	DefaultHTTPTimeout       = 10 * time.Second
	DefaultHTTPMaxBodyBytes  = 64 << 20
	DefaultMaxRemovedHosts   = 10
	DefaultMaxRemovedPercent = 25
	DefaultAcknowledgeFile   = "/etc/baremetal-ccm/inventory-ack"
	DefaultEventsNamespace   = "kube-system"
	DefaultBMCCallTimeout    = 10 * time.Second
	DefaultBMCCacheTTL       = 5 * time.Second
	DefaultBMCMaxConcurrent  = 64
	DefaultBMCFailures       = 3
	DefaultBMCBackoffInitial = 10 * time.Second
	DefaultBMCBackoffMax     = 5 * time.Minute
	DefaultBMCReady          = 5 * time.Minute
	DefaultBMCNotReady       = 10 * time.Second
	DefaultMaxFailedLogins   = 2
	DefaultFailedLoginWindow = 10 * time.Minute
)

// Defaults and bounds of the deletion guard, the inventory rules and the power-off
// policies.
const (
	DefaultGuardWindow      = time.Hour
	DefaultSettleTime       = 30 * time.Second
	MaxSettleTime           = time.Hour
	DefaultCredentialsDir   = "/etc/baremetal-ccm/bmc"
	DefaultPowerOffMaxHosts = 5
	DefaultPowerOffWindow   = time.Hour
	// DefaultStormCooldown is instances.stormCooldown's default.
	DefaultStormCooldown = 5 * time.Minute
	// MinWindow bounds deletionGuard.window and powerOffBudget.window from below.
	MinWindow = time.Minute
	// MinDeleteAfter and MinOutOfServiceAfter: a reboot or a BMC firmware update keeps
	// a host off for minutes, which must not fence or delete it.
	MinDeleteAfter       = 5 * time.Minute
	MinOutOfServiceAfter = time.Minute
)

// ErrInvalid is wrapped by every error Parse returns for a document that decodes but
// does not validate.
var ErrInvalid = errors.New("invalid CloudConfig")

// Load reads, defaults and validates the CloudConfig at path.
func Load(path string) (*CloudConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading cloud config: %w", err)
	}
	cfg, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("cloud config %s: %w", path, err)
	}
	return cfg, nil
}

// Parse decodes data strictly, applies defaults and validates the result. The error
// lists every problem found, each with its field path.
func Parse(data []byte) (*CloudConfig, error) { return parse(data, false) }

// LoadAgent is Load for the agent on worker hosts: the inventory section may be left
// out (the agent never reads the inventory; the leader publishes what it needs on
// its Node), and bgp.routerID is refused, since every agent reading the same file
// would share it.
func LoadAgent(path string) (*CloudConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading cloud config: %w", err)
	}
	cfg, err := parse(data, true)
	if err != nil {
		return nil, fmt.Errorf("cloud config %s: %w", path, err)
	}
	return cfg, nil
}

func parse(data []byte, agent bool) (*CloudConfig, error) {
	cfg := &CloudConfig{}
	fieldErrs, err := strictyaml.Unmarshal(data, cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	SetDefaults(cfg)
	errs := Validate(cfg)
	if agent {
		errs = agentErrors(cfg, errs)
	}
	if len(errs) > 0 || len(fieldErrs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, errors.Join(append(fieldErrs, errs.ToAggregate())...))
	}
	return cfg, nil
}

// SetDefaults fills every unset optional field with its default.
func SetDefaults(c *CloudConfig) {
	if c.EventsNamespace == "" {
		c.EventsNamespace = DefaultEventsNamespace
	}
	if f := c.Inventory.File; f != nil && f.PollInterval == nil {
		f.PollInterval = &metav1.Duration{Duration: DefaultFilePollInterval}
	}
	if h := c.Inventory.HTTP; h != nil {
		if h.PollInterval == nil {
			h.PollInterval = &metav1.Duration{Duration: DefaultHTTPPollInterval}
		}
		if h.Timeout == nil {
			h.Timeout = &metav1.Duration{Duration: DefaultHTTPTimeout}
		}
		if h.MaxBodyBytes == 0 {
			h.MaxBodyBytes = DefaultHTTPMaxBodyBytes
		}
	}
	b := &c.BMC
	for _, d := range []struct {
		p   **metav1.Duration
		def time.Duration
	}{{&b.CallTimeout, DefaultBMCCallTimeout}, {&b.CacheTTL, DefaultBMCCacheTTL}, {&b.BackoffInitial, DefaultBMCBackoffInitial}, {&b.BackoffMax, DefaultBMCBackoffMax},
		{&b.ReadyInterval, DefaultBMCReady}, {&b.NotReadyInterval, DefaultBMCNotReady}} {
		if *d.p == nil {
			*d.p = &metav1.Duration{Duration: d.def}
		}
	}
	if b.MaxConcurrent == 0 {
		b.MaxConcurrent = DefaultBMCMaxConcurrent
	}
	if b.FailureThreshold == 0 {
		b.FailureThreshold = DefaultBMCFailures
	}
	if b.FailedLogins.MaxFailures == 0 {
		b.FailedLogins.MaxFailures = DefaultMaxFailedLogins
	}
	if b.FailedLogins.Window == nil {
		b.FailedLogins.Window = &metav1.Duration{Duration: DefaultFailedLoginWindow}
	}
	setLoadBalancerDefaults(c.LoadBalancer)
	setBGPDefaults(c.BGP)
	setRoutesDefaults(c.Routes)
	g := &c.Inventory.DeletionGuard
	if g.MaxRemovedHosts == nil {
		v := int32(DefaultMaxRemovedHosts)
		g.MaxRemovedHosts = &v
	}
	if g.MaxRemovedPercent == nil {
		v := int32(DefaultMaxRemovedPercent)
		g.MaxRemovedPercent = &v
	}
	if g.AcknowledgeFile == "" {
		g.AcknowledgeFile = DefaultAcknowledgeFile
	}
	if g.Window == nil {
		g.Window = &metav1.Duration{Duration: DefaultGuardWindow}
	}
	if g.SettleTime == nil {
		g.SettleTime = &metav1.Duration{Duration: DefaultSettleTime}
	}
	if c.Inventory.CredentialsDir == "" {
		c.Inventory.CredentialsDir = DefaultCredentialsDir
	}
	pb := &c.Instances.PowerOffBudget
	if pb.MaxHosts == nil {
		v := int32(DefaultPowerOffMaxHosts)
		pb.MaxHosts = &v
	}
	if pb.Window == nil {
		pb.Window = &metav1.Duration{Duration: DefaultPowerOffWindow}
	}
	if c.Instances.MaxUnhealthy != nil && c.Instances.StormCooldown == nil {
		c.Instances.StormCooldown = &metav1.Duration{Duration: DefaultStormCooldown}
	}
}

// Validate returns every problem of a defaulted CloudConfig.
func Validate(c *CloudConfig) field.ErrorList {
	var errs field.ErrorList
	if c.APIVersion != APIVersion {
		errs = append(errs, field.NotSupported(field.NewPath("apiVersion"), c.APIVersion, []string{APIVersion}))
	}
	if c.Kind != Kind {
		errs = append(errs, field.NotSupported(field.NewPath("kind"), c.Kind, []string{Kind}))
	}
	for _, msg := range validation.IsDNS1123Label(c.EventsNamespace) {
		errs = append(errs, field.Invalid(field.NewPath("eventsNamespace"), c.EventsNamespace, msg))
	}
	errs = append(errs, validateInventory(&c.Inventory, field.NewPath("inventory"))...)
	errs = append(errs, validateBMC(&c.BMC, field.NewPath("bmc"))...)
	errs = append(errs, validateInstances(&c.Instances, field.NewPath("instances"))...)
	errs = append(errs, validateLoadBalancer(c.LoadBalancer, field.NewPath("loadBalancer"))...)
	errs = append(errs, validateBGP(c.BGP, field.NewPath("bgp"))...)
	errs = append(errs, validateRoutes(c.Routes, field.NewPath("routes"))...)
	if c.LoadBalancer != nil && c.LoadBalancer.Announcer == AnnouncerBGP && c.BGP == nil {
		errs = append(errs, field.Required(field.NewPath("bgp"), "loadBalancer.announcer is bgp (the default): configure the speaker (bgp.localASN, bgp.peers) or set loadBalancer.announcer to metallb or none"))
	}
	return errs
}

// agentErrors adapts Validate's errors to the agent: no inventory is needed, and a
// shared router ID is refused.
func agentErrors(c *CloudConfig, errs field.ErrorList) field.ErrorList {
	if c.Inventory.File == nil && c.Inventory.HTTP == nil {
		errs = slices.DeleteFunc(errs, func(e *field.Error) bool { return e.Field == "inventory" && e.Type == field.ErrorTypeRequired })
	}
	if c.BGP != nil && c.BGP.RouterID != "" {
		errs = append(errs, field.Forbidden(field.NewPath("bgp", "routerID"), "every agent reading this file would use the same router ID: remove it (each agent uses the router ID the CCM publishes on its Node: the host's bgpRouterID in the inventory, else its first IPv4 InternalIP) or give one host its own with --bgp-router-id"))
	}
	return errs
}

func validateInventory(inv *InventoryConfig, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch {
	case inv.File == nil && inv.HTTP == nil:
		errs = append(errs, field.Required(p, "set exactly one inventory source: inventory.file.path or inventory.http.url"))
	case inv.File != nil && inv.HTTP != nil:
		errs = append(errs, field.Forbidden(p.Child("http"), "inventory.file and inventory.http are mutually exclusive; set only one"))
	}
	if f := inv.File; f != nil {
		fp := p.Child("file")
		if f.Path == "" {
			errs = append(errs, field.Required(fp.Child("path"), "path of the Inventory document"))
		} else if !filepath.IsAbs(f.Path) {
			errs = append(errs, field.Invalid(fp.Child("path"), f.Path, "must be an absolute path"))
		}
		errs = append(errs, validatePositive(f.PollInterval, fp.Child("pollInterval"))...)
	}
	if h := inv.HTTP; h != nil {
		hp := p.Child("http")
		u, err := url.Parse(h.URL)
		switch {
		case h.URL == "":
			errs = append(errs, field.Required(hp.Child("url"), "URL of the Inventory document"))
		case err != nil:
			errs = append(errs, field.Invalid(hp.Child("url"), h.URL, err.Error()))
		case u.Scheme != "http" && u.Scheme != "https":
			errs = append(errs, field.Invalid(hp.Child("url"), h.URL, "scheme must be http or https"))
		case u.Host == "":
			errs = append(errs, field.Invalid(hp.Child("url"), h.URL, "must include a host"))
		case u.User != nil:
			errs = append(errs, field.Invalid(hp.Child("url"), "(redacted)", "must not carry credentials; use bearerTokenFile or a client certificate"))
		}
		if err == nil && u.Scheme == "http" && (h.CAFile != "" || h.InsecureSkipVerify || h.ClientCertFile != "") {
			errs = append(errs, field.Invalid(hp.Child("url"), h.URL, "TLS settings (caFile, insecureSkipVerify, clientCertFile) need an https:// URL"))
		}
		if (h.ClientCertFile == "") != (h.ClientKeyFile == "") {
			errs = append(errs, field.Required(hp.Child("clientKeyFile"), "clientCertFile and clientKeyFile must be set together"))
		}
		for name, v := range map[string]string{"caFile": h.CAFile, "clientCertFile": h.ClientCertFile, "clientKeyFile": h.ClientKeyFile, "bearerTokenFile": h.BearerTokenFile} {
			if v != "" && !filepath.IsAbs(v) {
				errs = append(errs, field.Invalid(hp.Child(name), v, "must be an absolute path"))
			}
		}
		errs = append(errs, validatePositive(h.PollInterval, hp.Child("pollInterval"))...)
		errs = append(errs, validatePositive(h.Timeout, hp.Child("timeout"))...)
		if h.MaxBodyBytes < 0 {
			errs = append(errs, field.Invalid(hp.Child("maxBodyBytes"), h.MaxBodyBytes, "must be positive"))
		}
	}
	g, gp := inv.DeletionGuard, p.Child("deletionGuard")
	if *g.MaxRemovedHosts < 0 {
		errs = append(errs, field.Invalid(gp.Child("maxRemovedHosts"), *g.MaxRemovedHosts, "must be 0 or more"))
	}
	if *g.MaxRemovedPercent < 0 || *g.MaxRemovedPercent > 100 {
		errs = append(errs, field.Invalid(gp.Child("maxRemovedPercent"), *g.MaxRemovedPercent, "must be between 0 and 100"))
	}
	if !filepath.IsAbs(g.AcknowledgeFile) {
		errs = append(errs, field.Invalid(gp.Child("acknowledgeFile"), g.AcknowledgeFile, "must be an absolute path"))
	}
	errs = append(errs, validateAtLeast(g.Window, MinWindow, gp.Child("window"),
		"over a shorter window hosts vanishing a few at a time are never counted together; use 1h (the default) or more")...)
	if d := g.SettleTime.Duration; d < 0 || d > MaxSettleTime {
		errs = append(errs, field.Invalid(gp.Child("settleTime"), d.String(),
			fmt.Sprintf("must be between 0s (act on the second poll that sees the same document) and %s; default %s", MaxSettleTime, DefaultSettleTime)))
	}
	if !filepath.IsAbs(inv.CredentialsDir) || filepath.Clean(inv.CredentialsDir) == "/" {
		errs = append(errs, field.Invalid(p.Child("credentialsDir"), inv.CredentialsDir,
			"must be the absolute path of a directory other than / that holds only BMC credentials and BGP password files (default "+DefaultCredentialsDir+")"))
	}
	return errs
}

func validateInstances(in *InstancesConfig, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, validateAtLeast(in.OutOfServiceAfter, MinOutOfServiceAfter, p.Child("outOfServiceAfter"),
		"a reboot or a BMC firmware update keeps a host off for minutes, and its volumes must not be force-detached for that; leave it unset to never taint")...)
	errs = append(errs, validateAtLeast(in.DeleteAfter, MinDeleteAfter, p.Child("deleteAfter"),
		"a reboot or a BMC firmware update keeps a host off for minutes, and its Node must not be deleted for that; leave it unset to never delete")...)
	pb, pp := in.PowerOffBudget, p.Child("powerOffBudget")
	if *pb.MaxHosts < 0 {
		errs = append(errs, field.Invalid(pp.Child("maxHosts"), *pb.MaxHosts, "must be 0 (every power-based action needs an acknowledgement) or more"))
	}
	errs = append(errs, validateAtLeast(pb.Window, MinWindow, pp.Child("window"),
		"over a shorter window a power event that takes hosts down a few at a time is never counted together; use 1h (the default) or more")...)
	if mu := in.MaxUnhealthy; mu != nil {
		if _, err := intstr.GetScaledValueFromIntOrPercent(mu, 100, false); err != nil || mu.Type == intstr.Int && mu.IntVal < 0 || mu.Type == intstr.String && !validPercent(mu.StrVal) {
			errs = append(errs, field.Invalid(p.Child("maxUnhealthy"), mu.String(), `must be a count of Nodes (0 or more, such as 3) or a percent from 0% to 100% (such as "30%")`))
		}
	}
	if in.StormCooldown != nil && in.StormCooldown.Duration < 0 {
		errs = append(errs, field.Invalid(p.Child("stormCooldown"), in.StormCooldown.Duration.String(), "must be 0 or more"))
	}
	return errs
}

// validateAtLeast reports d (when set) if it is shorter than minimum, saying why.
func validateAtLeast(d *metav1.Duration, minimum time.Duration, p *field.Path, why string) field.ErrorList {
	if d != nil && d.Duration < minimum {
		return field.ErrorList{field.Invalid(p, d.Duration.String(), fmt.Sprintf("must be at least %s: %s", minimum, why))}
	}
	return nil
}

func validateBMC(b *BMCConfig, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if b.CAFile != "" && !filepath.IsAbs(b.CAFile) {
		errs = append(errs, field.Invalid(p.Child("caFile"), b.CAFile, "must be an absolute path"))
	}
	errs = append(errs, validatePositive(b.CallTimeout, p.Child("callTimeout"))...)
	errs = append(errs, validatePositive(b.BackoffInitial, p.Child("backoffInitial"))...)
	errs = append(errs, validatePositive(b.BackoffMax, p.Child("backoffMax"))...)
	errs = append(errs, validatePositive(b.ReadyInterval, p.Child("readyInterval"))...)
	errs = append(errs, validatePositive(b.NotReadyInterval, p.Child("notReadyInterval"))...)
	if b.CacheTTL.Duration < 0 {
		errs = append(errs, field.Invalid(p.Child("cacheTTL"), b.CacheTTL.Duration.String(), "must be 0 (no cache) or positive"))
	}
	if b.MaxConcurrent < 1 {
		errs = append(errs, field.Invalid(p.Child("maxConcurrent"), b.MaxConcurrent, "must be 1 or more"))
	}
	if b.FailureThreshold < 1 {
		errs = append(errs, field.Invalid(p.Child("failureThreshold"), b.FailureThreshold, "must be 1 or more"))
	}
	if b.BackoffMax.Duration < b.BackoffInitial.Duration {
		errs = append(errs, field.Invalid(p.Child("backoffMax"), b.BackoffMax.Duration.String(), "must not be shorter than backoffInitial"))
	}
	fp := p.Child("failedLogins")
	if b.FailedLogins.MaxFailures < 1 {
		errs = append(errs, field.Invalid(fp.Child("maxFailures"), b.FailedLogins.MaxFailures, "must be 1 or more (keep it below the BMCs' own lockout threshold, often 3)"))
	}
	errs = append(errs, validateAtLeast(b.FailedLogins.Window, time.Minute, fp.Child("window"),
		"refused credentials must not be retried sooner: BMCs lock a client out after a few failed logins")...)
	return errs
}

func validatePositive(d *metav1.Duration, p *field.Path) field.ErrorList {
	if d != nil && d.Duration <= 0 {
		return field.ErrorList{field.Invalid(p, d.Duration.String(), "must be a positive duration such as 5s or 1m")}
	}
	return nil
}

// validPercent reports whether s is a percent from 0% to 100%.
func validPercent(s string) bool {
	n, ok := strings.CutSuffix(s, "%")
	v, err := strconv.Atoi(n)
	return ok && err == nil && v >= 0 && v <= 100
}
