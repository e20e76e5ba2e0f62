package bird

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// RouteSince returns, for every prefix in BIRD's tables, when its best path last
// changed, read from `birdc show route primary` (BIRD's clock: the machine's local
// time, to the millisecond). It needs Options.RouteTimes.
func (r *Router) RouteSince(ctx context.Context) (map[netip.Prefix]time.Time, error) {
	if !r.opts.RouteTimes {
		return nil, errors.New("bird: RouteSince needs Options.RouteTimes")
	}
	out, err := r.Birdc(ctx, "show", "route", "primary")
	if err != nil {
		return nil, err
	}
	return parseRouteSince(out, time.Local)
}

// routeTimeLayout is `timeformat route "%F %T.%3f"`.
const routeTimeLayout = "2006-01-02 15:04:05.000"

// parseRouteSince reads the "<prefix> unicast [<protocol> <date> <time>] ..." lines
// of `show route` with RouteTimes; other lines are skipped.
func parseRouteSince(out string, loc *time.Location) (map[netip.Prefix]time.Time, error) {
	res := map[netip.Prefix]time.Time{}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == ' ' || line[0] == '\t' || strings.HasPrefix(line, "BIRD ") || strings.HasPrefix(line, "Table ") {
			continue
		}
		open, end := strings.IndexByte(line, '['), strings.IndexByte(line, ']')
		if open < 0 || end < open {
			continue
		}
		p, err := netip.ParsePrefix(strings.Fields(line)[0])
		if err != nil {
			return nil, fmt.Errorf("bird: route line %q: %w", line, err)
		}
		f := strings.Fields(line[open+1 : end])
		if len(f) < 3 {
			return nil, fmt.Errorf("bird: route line %q has no date and time (is Options.RouteTimes set?)", line)
		}
		t, err := time.ParseInLocation(routeTimeLayout, f[1]+" "+f[2], loc)
		if err != nil {
			return nil, fmt.Errorf("bird: route line %q: %w", line, err)
		}
		res[p] = t
	}
	return res, sc.Err()
}
