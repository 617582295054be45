package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock"
)

// startNodes starts 5 independent in-process Redis masters and returns a
// go-redis client for each. In production these are 5 real Redis servers on
// separate machines. stop closes the clients, then the servers: call it after
// the redlock.Client has been closed.
func startNodes() (clients []redis.UniversalClient, stop func()) {
	var servers []*miniredis.Miniredis
	stop = func() {
		for _, rc := range clients {
			_ = rc.Close()
		}
		for _, m := range servers {
			m.Close()
		}
	}
	for range 5 {
		m, err := miniredis.Run()
		if err != nil {
			stop()
			log.Fatal(err)
		}
		servers = append(servers, m)
		rc := redis.NewClient(&redis.Options{Addr: m.Addr()})
		clients = append(clients, rc)
		// Connect now, so that dialing does not count against the first
		// lock's node timeout.
		if err := rc.Ping(context.Background()).Err(); err != nil {
			stop()
			log.Fatal(err)
		}
	}
	return clients, stop
}

func ExampleNew() {
	clients, stop := startNodes()
	defer stop()

	// The options set the Client's defaults; each call may override them.
	c, err := redlock.New(clients,
		redlock.WithTTL(30*time.Second),
		redlock.WithKeyPrefix("myapp:"),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close() // before stop: Close waits for requests in flight

	fmt.Println("quorum:", c.Quorum())

	// Bad configuration is rejected here, not on the first Lock.
	_, err = redlock.New(clients, redlock.WithTTL(-time.Second))
	fmt.Println("invalid option:", errors.Is(err, redlock.ErrInvalidOption))

	// Output:
	// quorum: 3
	// invalid option: true
}

func ExampleClient_Lock() {
	clients, stop := startNodes()
	defer stop()
	c, err := redlock.New(clients)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// Lock retries until it wins or ctx ends: the deadline bounds the wait.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l, err := c.Lock(ctx, "nightly-report")
	if err != nil {
		log.Fatal(err)
	}
	defer func() {
		if err := l.Unlock(ctx); err != nil {
			log.Print(err)
		}
	}()

	fmt.Println("locked", l.Key())
	// Finish the work before Until: past it, another client may hold the lock.
	fmt.Println("valid:", time.Now().Before(l.Until()))

	// Output:
	// locked nightly-report
	// valid: true
}

func ExampleClient_Lock_timeout() {
	clients, stop := startNodes()
	defer stop()
	c, err := redlock.New(clients)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx := context.Background()
	held, err := c.Lock(ctx, "nightly-report")
	if err != nil {
		log.Fatal(err)
	}
	defer held.Unlock(ctx)

	// A second Lock on the same key waits until ctx ends. Its error keeps
	// the reason: it matches both ErrNotAcquired and the ctx error.
	ctx2, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = c.Lock(ctx2, "nightly-report")
	fmt.Println("not acquired:", errors.Is(err, redlock.ErrNotAcquired))
	fmt.Println("deadline exceeded:", errors.Is(err, context.DeadlineExceeded))

	// Output:
	// not acquired: true
	// deadline exceeded: true
}

func ExampleClient_TryLock() {
	clients, stop := startNodes()
	defer stop()
	c, err := redlock.New(clients)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	// TryLock makes one attempt: use it to skip work that someone else is
	// already doing.
	l, err := c.TryLock(ctx, "nightly-report")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Unlock(ctx)
	fmt.Println("first worker: locked", l.Key())

	_, err = c.TryLock(ctx, "nightly-report")
	if errors.Is(err, redlock.ErrNotAcquired) {
		fmt.Println("second worker: busy, skipping")
	}

	// Output:
	// first worker: locked nightly-report
	// second worker: busy, skipping
}

func ExampleLock_Extend() {
	clients, stop := startNodes()
	defer stop()
	c, err := redlock.New(clients)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l, err := c.Lock(ctx, "nightly-report", redlock.WithTTL(2*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Unlock(ctx)

	// Extend before Until passes to keep the lock for another full TTL.
	// Once it fails (ErrNotHeld), stop working: the lock may be gone.
	before := l.Until()
	if err := l.Extend(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("extended:", l.Until().After(before))

	// Output:
	// extended: true
}

func ExampleQuorumError() {
	clients, stop := startNodes()
	defer stop()
	c, err := redlock.New(clients)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	// Another holder has the key on every node, the way any Redlock client
	// (this one, go-redsync, redlock-py) stores it: SET key token NX PX ttl.
	for _, rc := range clients {
		if err := rc.SetNX(ctx, "nightly-report", "another-holder", time.Minute).Err(); err != nil {
			log.Fatal(err)
		}
	}

	_, err = c.TryLock(ctx, "nightly-report")
	fmt.Println("not acquired:", errors.Is(err, redlock.ErrNotAcquired))
	fmt.Println("ctx ended:", errors.Is(err, context.DeadlineExceeded))

	// The *QuorumError says what each node answered.
	var qe *redlock.QuorumError
	if errors.As(err, &qe) {
		fmt.Printf("%s %q: %d yes, quorum %d\n", qe.Stats.Op, qe.Stats.Key, qe.Stats.Yes, qe.Stats.Quorum)
	}

	// Output:
	// not acquired: true
	// ctx ended: false
	// lock "nightly-report": 0 yes, quorum 3
}

// fencedStore is a store that remembers the largest fence it has seen and
// rejects writes that carry a smaller one: the other half of fencing.
type fencedStore struct {
	highest uint64
	value   string
}

var errStaleFence = errors.New("stale fence: a newer lock holder has written")

func (s *fencedStore) Write(fence uint64, value string) error {
	if fence < s.highest {
		return errStaleFence
	}
	s.highest, s.value = fence, value
	return nil
}

func ExampleLock_Fence() {
	clients, stop := startNodes()
	defer stop()
	c, err := redlock.New(clients, redlock.WithFencing(true))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	store := &fencedStore{}

	// A first holder takes the lock, then stalls (a long GC pause, say)
	// past its validity without knowing it.
	first, err := c.Lock(ctx, "invoice:42")
	if err != nil {
		log.Fatal(err)
	}
	_ = first.Unlock(ctx) // here: the lock moves on while it is paused

	// A second holder takes the lock and writes.
	second, err := c.Lock(ctx, "invoice:42")
	if err != nil {
		log.Fatal(err)
	}
	defer second.Unlock(ctx)
	fmt.Println("second holder's fence is larger:", second.Fence() > first.Fence())
	fmt.Println("second writes:", store.Write(second.Fence(), "paid"))

	// The first holder wakes up and writes with its old fence: rejected.
	fmt.Println("first writes:", store.Write(first.Fence(), "unpaid"))
	fmt.Println("value:", store.value)
	// Output:
	// second holder's fence is larger: true
	// second writes: <nil>
	// first writes: stale fence: a newer lock holder has written
	// value: paid
}

func ExampleClient_Do() {
	clients, stop := startNodes()
	defer stop()
	c, err := redlock.New(clients, redlock.WithTTL(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// Do waits for the lock, keeps it alive while fn runs, and releases it
	// after. fn's ctx is cancelled the moment the lock is lost.
	err = c.Do(context.Background(), "nightly-report", func(ctx context.Context) error {
		fmt.Println("generating the report under the lock")
		return nil
	})
	switch {
	case errors.Is(err, redlock.ErrNotAcquired):
		fmt.Println("someone else is generating it")
	case errors.Is(err, redlock.ErrLockLost):
		fmt.Println("lost the lock part way: the report may be incomplete")
	case err != nil:
		fmt.Println("the report failed:", err)
	default:
		fmt.Println("done")
	}
	// Output:
	// generating the report under the lock
	// done
}

func ExampleLock_Done() {
	clients, stop := startNodes()
	defer stop()
	c, err := redlock.New(clients, redlock.WithTTL(200*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// Without auto-extension, Done closes when the validity runs out.
	l, err := c.Lock(context.Background(), "short-job")
	if err != nil {
		log.Fatal(err)
	}
	work := time.After(time.Second) // longer than the lock lives
	select {
	case <-work:
		fmt.Println("finished in time")
	case <-l.Done():
		fmt.Println("stopped:", errors.Is(l.Err(), redlock.ErrLockLost))
	}
	// Output:
	// stopped: true
}

func ExampleClient_LockMulti() {
	clients, stop := startNodes()
	defer stop()
	c, err := redlock.New(clients)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	// All or nothing: a transfer locks both accounts at once, so that two
	// transfers in opposite directions cannot deadlock.
	l, err := c.LockMulti(ctx, []string{"account:alice", "account:bob"})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Unlock(ctx)
	fmt.Println("locked", l.Keys())

	// A single-key lock on either account waits for it.
	_, err = c.TryLock(ctx, "account:bob")
	fmt.Println("bob alone:", errors.Is(err, redlock.ErrNotAcquired))
	// Output:
	// locked [account:alice account:bob]
	// bob alone: true
}
