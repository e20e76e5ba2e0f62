package bird

import (
	_ "embed"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"text/template"
	"time"
)

// configTemplate is bird.conf as an operator would write it for a top-of-rack
// router peering with the CCM's speakers; docs/configuration.md shows its Example verbatim.
//
//go:embed bird.conf.tmpl
var configTemplate string

var configTmpl = template.Must(template.New("bird.conf").Option("missingkey=error").Funcs(template.FuncMap{
	"join": func(ps []netip.Prefix) string {
		s := make([]string, len(ps))
		for i, p := range ps {
			s[i] = p.String() + "+" // the prefix and every more-specific
		}
		return strings.Join(s, ", ")
	},
}).Parse(configTemplate))

// configData is what the template needs.
type configData struct {
	// Test adds the tests' logging; without it the output is the example in docs/configuration.md.
	Test, EventLog     bool
	RouteTimes         bool
	LogFile            string
	RouterV4           netip.Addr
	ASN                uint32
	HoldTime           int
	Keepalive          int
	GracefulRestart    bool
	BFD                *bfdData
	BFDOnBGP           string // "", "on" or "graceful"
	AcceptV4, AcceptV6 []netip.Prefix
	Protocols          []protocolData
}

type bfdData struct {
	MinRx, MinTx, IdleTx string
	Multiplier           int
	Passive              string
	Neighbors            []bfdNeighbor
}

type bfdNeighbor struct{ Addr, Local netip.Addr }

type protocolData struct {
	Name            string
	Local, Neighbor netip.Addr
	PeerASN         uint32
	Password        string
}

func usec(d time.Duration) string { return fmt.Sprintf("%d us", d/time.Microsecond) }

func (b BFD) data() *bfdData {
	c := b.withDefaults()
	return &bfdData{MinRx: usec(c.MinRx), MinTx: usec(c.MinTx), IdleTx: usec(c.IdleTx), Multiplier: c.Multiplier,
		Passive: map[bool]string{true: "on", false: "off"}[c.Passive]}
}

// config renders bird.conf for r's options and addresses.
func (r *Router) config() string {
	d := configData{
		Test: true, EventLog: r.opts.EventLog, RouteTimes: r.opts.RouteTimes, LogFile: filepath.Join(r.dir, "bird.log"),
		RouterV4: r.RouterV4, ASN: r.ASN, HoldTime: r.opts.HoldTime, Keepalive: max(r.opts.HoldTime/3, 1),
		GracefulRestart: r.opts.GracefulRestart,
	}
	for _, p := range r.opts.Accept {
		if p.Addr().Is4() {
			d.AcceptV4 = append(d.AcceptV4, p.Masked())
		} else {
			d.AcceptV6 = append(d.AcceptV6, p.Masked())
		}
	}
	if b := r.opts.BFD; b != nil {
		d.BFD = b.data()
		switch {
		case b.BGP && b.Graceful:
			d.BFDOnBGP = "graceful"
		case b.BGP:
			d.BFDOnBGP = "on"
		default:
			for i := range r.opts.Speakers {
				d.BFD.Neighbors = append(d.BFD.Neighbors, bfdNeighbor{r.SpeakerV4(i), r.RouterV4}, bfdNeighbor{r.SpeakerV6(i), r.RouterV6})
			}
		}
	}
	for i, s := range r.opts.Speakers {
		name := fmt.Sprintf("s%d", i+1)
		d.Protocols = append(d.Protocols,
			protocolData{name, r.RouterV4, r.SpeakerV4(i), s.ASN, s.Password},
			protocolData{name + "v6", r.RouterV6, r.SpeakerV6(i), s.ASN, s.Password})
	}
	return render(d)
}

func render(d configData) string {
	var b strings.Builder
	if err := configTmpl.Execute(&b, d); err != nil {
		panic(fmt.Sprintf("bird: rendering bird.conf: %v", err)) // a template bug, caught by the tests
	}
	return b.String()
}

// Example is bird.conf for a top-of-rack router as docs/configuration.md shows it: rendered
// from the template the tests use, without their logging, for three CCM replicas
// (10.0.0.11-13 and fd00::11-13, AS 65000, TCP-MD5) peering with the router
// 10.0.0.254 / fd00::fe (AS 65001), the pools 192.0.2.0/24 and 2001:db8:5::/64, the
// pod network 10.244.0.0/16, graceful restart and BFD 300 ms x 3.
func Example() string {
	d := configData{
		RouterV4: netip.MustParseAddr("10.0.0.254"), ASN: 65001, HoldTime: 9, Keepalive: 3, GracefulRestart: true,
		BFD: BFD{}.data(), BFDOnBGP: "on",
		AcceptV4: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("10.244.0.0/16")},
		AcceptV6: []netip.Prefix{netip.MustParsePrefix("2001:db8:5::/64")},
	}
	for i := range 3 {
		name := fmt.Sprintf("ccm%d", i+1)
		d.Protocols = append(d.Protocols,
			protocolData{name, netip.MustParseAddr("10.0.0.254"), netip.AddrFrom4([4]byte{10, 0, 0, byte(11 + i)}), 65000, "CHANGE-ME"},
			protocolData{name + "v6", netip.MustParseAddr("fd00::fe"), netip.MustParseAddr(fmt.Sprintf("fd00::%x", 0x11+i)), 65000, "CHANGE-ME"})
	}
	return render(d)
}
