package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/redlockgo/redlock"
)

// A semaphore of 2 permits on 5 nodes: each permit needs 4 of them, so that
// any 3 holders would have to share a node, which counts at most 2.
func ExampleClient_Semaphore() {
	clients, stop := startNodes()
	defer stop()
	c, err := redlock.New(clients)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx := context.Background()
	s, err := c.Semaphore("render-jobs", 2)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("quorum:", s.Quorum())

	a, err := s.Acquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	b, err := s.Acquire(ctx)
	if err != nil {
		log.Fatal(err)
	}
	_, err = s.TryAcquire(ctx)
	fmt.Println("third permit refused:", errors.Is(err, redlock.ErrNotAcquired))

	if err := a.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	d, err := s.TryAcquire(ctx)
	fmt.Println("after a release:", err == nil)
	_ = b.Unlock(ctx)
	_ = d.Unlock(ctx)
	// Output:
	// quorum: 4
	// third permit refused: true
	// after a release: true
}
