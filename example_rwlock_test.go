package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/redlockgo/redlock"
)

func ExampleClient_RLock() {
	clients, stop := startNodes()
	defer stop()
	c, err := redlock.New(clients)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	// Readers share the key: each hold is a Lock of its own.
	r1, err := c.RLock(ctx, "config")
	if err != nil {
		log.Fatal(err)
	}
	r2, err := c.RLock(ctx, "config")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("two readers hold the key")

	// A writer is refused while readers hold it.
	_, err = c.TryLock(ctx, "config")
	fmt.Println("writer refused:", errors.Is(err, redlock.ErrNotAcquired))

	// Unlocking one reader leaves the other.
	_ = r1.Unlock(ctx)
	_, err = c.TryLock(ctx, "config")
	fmt.Println("writer refused with one reader left:", errors.Is(err, redlock.ErrNotAcquired))

	// Once the last reader leaves, the writer gets the key, and readers
	// wait for it.
	_ = r2.Unlock(ctx)
	w, err := c.TryLock(ctx, "config")
	if err != nil {
		log.Fatal(err)
	}
	_, err = c.TryRLock(ctx, "config")
	fmt.Println("reader refused while the writer holds:", errors.Is(err, redlock.ErrNotAcquired))
	_ = w.Unlock(ctx)

	// Output:
	// two readers hold the key
	// writer refused: true
	// writer refused with one reader left: true
	// reader refused while the writer holds: true
}
