package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock"
)

// invoiceRow is one row of a table that checks fences itself, as this
// statement does in SQL:
//
//	UPDATE invoices SET status = $2, fence = $1 WHERE id = $3 AND fence <= $1
//
// A write whose fence is below the row's is refused: a newer holder has
// written. An equal fence is the same hold writing again.
type invoiceRow struct {
	mu     sync.Mutex // stands for the database's row lock
	fence  uint64
	status string
}

var errRowFence = errors.New("0 rows updated: the row has a newer fence")

// update runs the statement: one conditional write, so that no holder can
// slip in between the check and the write.
func (r *invoiceRow) update(fence uint64, status string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fence > fence {
		return errRowFence
	}
	r.fence, r.status = fence, status
	return nil
}

func ExampleClient_ValidateFence() {
	// Five in-process nodes whose clocks the example moves by hand.
	var clients []redis.UniversalClient
	var servers []*miniredis.Miniredis
	for range 5 {
		m, err := miniredis.Run()
		if err != nil {
			log.Fatal(err)
		}
		defer m.Close()
		rc := redis.NewClient(&redis.Options{Addr: m.Addr()})
		defer rc.Close()
		if err := rc.Ping(context.Background()).Err(); err != nil {
			log.Fatal(err)
		}
		servers, clients = append(servers, m), append(clients, rc)
	}
	c, err := redlock.New(clients, redlock.WithFencing(true), redlock.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	row := &invoiceRow{}

	first, err := c.Lock(ctx, "invoice:42")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("first holder's fence valid:", c.ValidateFence(ctx, "invoice:42", first.Fence()))
	fmt.Println("first holder writes:", row.update(first.Fence(), "sent"))

	// The first holder stalls (a GC pause, a stuck request) past its TTL:
	// the nodes let the key go, and a second holder takes it.
	for _, m := range servers {
		m.FastForward(11 * time.Second)
	}
	second, err := c.Lock(ctx, "invoice:42")
	if err != nil {
		log.Fatal(err)
	}
	defer second.Unlock(ctx)
	fmt.Println("second holder writes:", row.update(second.Fence(), "paid"))

	// The first holder wakes up. Asked before its write, the nodes say
	// its fence is stale; written anyway, the row refuses it.
	err = c.ValidateFence(ctx, "invoice:42", first.Fence())
	fmt.Println("first holder's fence stale:", errors.Is(err, redlock.ErrStaleFence))
	fmt.Println("first holder writes:", row.update(first.Fence(), "cancelled"))
	fmt.Println("status:", row.status)
	// Output:
	// first holder's fence valid: <nil>
	// first holder writes: <nil>
	// second holder writes: <nil>
	// first holder's fence stale: true
	// first holder writes: 0 rows updated: the row has a newer fence
	// status: paid
}
