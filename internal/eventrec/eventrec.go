// Package eventrec builds this binary's own event broadcasters (the upstream
// controllers build theirs): client-go's, with smaller correlation caches.
//
// Each broadcaster that records to the API keeps three LRU caches (aggregation,
// de-duplication, spam filter) of 4096 entries by default, holding event keys that
// join the event's fields. With one event per Service during a burst of 10,000
// Services, the CCM's three broadcasters held about 6.5 MB in them for good.
// CacheSize entries keep de-duplication and aggregation for the objects of a burst
// in progress (an event repeated on the same object is still a count increment,
// not a new Event); only objects not seen for the last CacheSize distinct events
// are forgotten, so a later repeat of theirs is written as a new Event (and the
// spam filter's per-object budget starts afresh).
package eventrec

import (
	"context"

	"k8s.io/client-go/tools/record"
)

// CacheSize is the number of entries of each correlation cache.
const CacheSize = 512

// NewBroadcaster returns a record.EventBroadcaster with CacheSize caches, stopped
// when ctx is done or by its Shutdown (context.Background: only by Shutdown).
func NewBroadcaster(ctx context.Context) record.EventBroadcaster {
	return record.NewBroadcaster(record.WithContext(ctx),
		record.WithCorrelatorOptions(record.CorrelatorOptions{LRUCacheSize: CacheSize}))
}
