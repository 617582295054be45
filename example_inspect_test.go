package redlock_test

import (
	"context"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/redlockgo/redlock"
)

func ExampleClient_Inspect() {
	clients, stop := startNodes()
	defer stop()
	c, err := redlock.New(clients)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	h, err := c.Inspect(ctx, "nightly-report")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("free: held", h.Held)

	l, err := c.TryLock(ctx, "nightly-report", redlock.WithLabel("host-a pid 42"))
	if err != nil {
		log.Fatal(err)
	}
	// Inspect reads every node, and says whether a quorum holds the key,
	// for whom, and how long the quorum still guarantees it.
	h, err = c.Inspect(ctx, "nightly-report")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("locked: held", h.Held, "by us", h.Token == l.Token(), "label", h.Label)
	fmt.Println("remaining within the TTL:", h.Remaining > 0 && h.Remaining <= redlock.DefaultTTL)

	if err := l.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	h, err = c.Inspect(ctx, "nightly-report")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("unlocked: held", h.Held)

	// A key of another type is reported, not mistaken for a lock.
	for _, rc := range clients {
		if err := rc.RPush(ctx, "jobs", "a").Err(); err != nil {
			log.Fatal(err)
		}
	}
	h, err = c.Inspect(ctx, "jobs")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("jobs: held", h.Held, "layout", h.Nodes[0].Layout)

	// Output:
	// free: held false
	// locked: held true by us true label host-a pid 42
	// remaining within the TTL: true
	// unlocked: held false
	// jobs: held false layout foreign
}

func ExampleWithLabel() {
	clients, stop := startNodes()
	defer stop()
	// The Client's label goes with each of its locks.
	c, err := redlock.New(clients, redlock.WithLabel("host-a pid 42"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	l, err := c.TryLock(ctx, "nightly-report")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Unlock(ctx)
	// Each node keeps one plain string: the token, a space, the label.
	// redis-cli GET nightly-report shows the same.
	token, label, _ := strings.Cut(l.Token(), " ")
	fmt.Println("token:", len(token), "characters")
	fmt.Println("label:", label)

	// A call's label replaces the Client's.
	w, err := c.TryLock(ctx, "weekly-report", redlock.WithLabel("job 7"))
	if err != nil {
		log.Fatal(err)
	}
	defer w.Unlock(ctx)
	h, err := c.Inspect(ctx, "weekly-report")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("inspect:", h.Label)

	// Output:
	// token: 36 characters
	// label: host-a pid 42
	// inspect: job 7
}
