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
