package frr

import (
	_ "embed"
	"fmt"
	"net/netip"
	"strings"
	"text/template"
	"time"
)

// configTemplate is frr.conf as an operator would write it for a top-of-rack
// router peering with the CCM's speakers; README.md shows it verbatim.
//
//go:embed frr.conf.tmpl
var configTemplate string

var configTmpl = template.Must(template.New("frr.conf").Option("missingkey=error").Parse(configTemplate))

// configData is what the template needs.
type configData struct {
	// Test adds what tests need (log file, debug logging); without it the output is
	// the example in docs/configuration.md (Example).
	Test               bool
	Hostname, LogFile  string
	ASN                uint32
	RouterV4, RouterV6 netip.Addr
	Keepalive          int
	HoldTime           int
	GracefulRestart    GRMode
	StalePathTime      int
	GRNotification     bool
	HardAdminReset     bool
	BFD                *bfdData
	AcceptV4, AcceptV6 []acceptData
	Neighbors          []neighborData
}

type bfdData struct {
	TransmitMs, ReceiveMs, DetectMultiplier int
	Passive                                 bool
}

type acceptData struct {
	Seq    int
	Prefix netip.Prefix
}

type neighborData struct {
	Addr     netip.Addr
	Group    string
	ASN      uint32
	Password string
}

// renderConfig renders frr.conf for r's options and addresses.
func (r *Router) renderConfig() (string, error) {
	o := r.opts
	d := configData{
		Test:            true,
		Hostname:        r.Namespace,
		LogFile:         r.logFile(),
		ASN:             r.ASN,
		RouterV4:        r.RouterV4,
		RouterV6:        r.RouterV6,
		Keepalive:       max(o.HoldTime/3, 1),
		HoldTime:        o.HoldTime,
		GracefulRestart: o.GracefulRestart,
		StalePathTime:   o.StalePathTime,
		GRNotification:  !o.NoGRNotification,
		HardAdminReset:  !o.NoHardAdminReset,
	}
	if b := o.BFD; b != nil {
		d.BFD = &bfdData{
			TransmitMs:       int(b.TransmitInterval / time.Millisecond),
			ReceiveMs:        int(b.ReceiveInterval / time.Millisecond),
			DetectMultiplier: b.DetectMultiplier,
			Passive:          b.Passive,
		}
	}
	for _, p := range o.Accept {
		if p.Addr().Is4() {
			d.AcceptV4 = append(d.AcceptV4, acceptData{5 * (len(d.AcceptV4) + 1), p.Masked()})
		} else {
			d.AcceptV6 = append(d.AcceptV6, acceptData{5 * (len(d.AcceptV6) + 1), p.Masked()})
		}
	}
	for i, s := range o.Speakers {
		d.Neighbors = append(d.Neighbors,
			neighborData{r.SpeakerV4(i), "SPEAKERS-V4", s.ASN, s.Password},
			neighborData{r.SpeakerV6(i), "SPEAKERS-V6", s.ASN, s.Password})
	}
	var b strings.Builder
	if err := configTmpl.Execute(&b, d); err != nil {
		return "", fmt.Errorf("frr: rendering frr.conf: %w", err)
	}
	return b.String(), nil
}

// Example is frr.conf for a top-of-rack router as docs/configuration.md shows it: rendered
// from the template the tests use, without their logging, for three CCM replicas
// (10.0.0.11-13, AS 65000, TCP-MD5) peering with the router 10.0.0.254 (AS 65001),
// the pools 192.0.2.0/24 and 2001:db8:5::/64, the pod network 10.244.0.0/16, graceful
// restart helper (FRR's default, with RFC 8538) and BFD 300 ms x 3.
func Example() (string, error) {
	d := configData{
		Hostname: "tor1", ASN: 65001,
		RouterV4: netip.MustParseAddr("10.0.0.254"), RouterV6: netip.MustParseAddr("fd00::fe"),
		Keepalive: 3, HoldTime: 9, GRNotification: true, HardAdminReset: true,
		BFD: &bfdData{TransmitMs: 300, ReceiveMs: 300, DetectMultiplier: 3},
	}
	for i, p := range []string{"192.0.2.0/24", "10.244.0.0/16"} {
		d.AcceptV4 = append(d.AcceptV4, acceptData{5 * (i + 1), netip.MustParsePrefix(p)})
	}
	d.AcceptV6 = []acceptData{{5, netip.MustParsePrefix("2001:db8:5::/64")}}
	for i := range 3 {
		d.Neighbors = append(d.Neighbors,
			neighborData{netip.AddrFrom4([4]byte{10, 0, 0, byte(11 + i)}), "SPEAKERS-V4", 65000, "CHANGE-ME"},
			neighborData{netip.MustParseAddr(fmt.Sprintf("fd00::%x", 0x11+i)), "SPEAKERS-V6", 65000, "CHANGE-ME"})
	}
	var b strings.Builder
	if err := configTmpl.Execute(&b, d); err != nil {
		return "", fmt.Errorf("frr: rendering the example: %w", err)
	}
	return b.String(), nil
}
