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

// reportRow is a row that a leader writes, and that checks the leader's
// term itself, as this statement does in SQL:
//
//	UPDATE reports SET body = $2, fence = $1 WHERE id = $3 AND fence <= $1
//
// A write whose term is below the row's is refused: a newer leader has
// written.
type reportRow struct {
	mu    sync.Mutex // stands for the database's row lock
	fence uint64
	body  string
}

var errStaleTerm = errors.New("0 rows updated: a newer leader has written")

// update runs the statement.
func (r *reportRow) update(term uint64, body string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fence > term {
		return errStaleTerm
	}
	r.fence, r.body = term, body
	return nil
}

func ExampleClient_Election() {
	// Five in-process nodes.
	var clients []redis.UniversalClient
	for range 5 {
		m, err := miniredis.Run()
		if err != nil {
			log.Fatal(err)
		}
		defer m.Close()
		rc := redis.NewClient(&redis.Options{Addr: m.Addr()})
		defer rc.Close()
		clients = append(clients, rc)
	}
	c, err := redlock.New(clients, redlock.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	election, err := c.Election("report-writer")
	if err != nil {
		log.Fatal(err)
	}

	// Someone follows the election: the leader now, then every change.
	octx, stop := context.WithCancel(ctx)
	defer stop()
	changes := election.Observe(octx)
	fmt.Printf("observed: %+v\n", <-changes)

	a, err := election.Campaign(ctx, "host-a")
	if err != nil {
		log.Fatal(err)
	}
	ld, err := election.Leader(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("leader:", ld.Value, "with its lock's fence as its term:", ld.Term == a.Fence())
	for ld := range changes {
		if ld.Term != 0 {
			fmt.Println("observed:", ld.Value)
			break
		}
	}
	row := &reportRow{}
	fmt.Println("host-a writes:", row.update(a.Fence(), "by host-a"))

	// host-b campaigns, and leads once host-a resigns.
	next := make(chan *redlock.Lock)
	go func() {
		b, err := election.Campaign(ctx, "host-b")
		if err != nil {
			log.Fatal(err)
		}
		next <- b
	}()
	if err := a.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	b := <-next
	fmt.Println("host-b leads, with a larger term:", b.Fence() > a.Fence())
	fmt.Println("host-b writes:", row.update(b.Fence(), "by host-b"))
	// host-a's write, late, is refused: its term is stale.
	fmt.Println("host-a writes:", row.update(a.Fence(), "late"))

	if err := b.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	_, err = election.Leader(ctx)
	fmt.Println("nobody leads:", errors.Is(err, redlock.ErrNoLeader))
	// Output:
	// observed: {Value: Term:0}
	// leader: host-a with its lock's fence as its term: true
	// observed: host-a
	// host-a writes: <nil>
	// host-b leads, with a larger term: true
	// host-b writes: <nil>
	// host-a writes: 0 rows updated: a newer leader has written
	// nobody leads: true
}
