package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock"
)

// Extend with a new TTL, as redislock's Refresh takes one: the lock then
// keeps that TTL for its later extensions.
func ExampleLock_Extend_withTTL() {
	clients, stop := startNodes()
	defer stop()
	c, err := redlock.New(clients, redlock.WithTTL(2*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx := context.Background()
	l, err := c.TryLock(ctx, "report")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Unlock(ctx)

	// The work turned out to need longer: ask for a minute.
	if err := l.Extend(ctx, redlock.WithTTL(time.Minute)); err != nil {
		log.Fatal(err)
	}
	fmt.Println("valid for more than 50s:", time.Until(l.Until()) > 50*time.Second)

	// A TTL a lock could not have is refused, and leaves the lock alone.
	// Extend takes no other option: l.Extend(ctx, redlock.WithKeyPrefix("x"))
	// does not compile.
	err = l.Extend(ctx, redlock.WithTTL(-time.Second))
	fmt.Println(errors.Is(err, redlock.ErrInvalidOption), l.Err() == nil)
	// Output:
	// valid for more than 50s: true
	// true true
}

// A round that was decided before every node answered shows the slower
// nodes as not waited for, not as failures.
func ExampleVote() {
	clients, stop := startNodes()
	defer stop()
	c, err := redlock.New(clients)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx := context.Background()
	l, err := c.TryLock(ctx, "votes")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Unlock(ctx)
	st := l.Stats()
	// Yes + NotWaited is 5 on healthy nodes, however fast each answered.
	fmt.Println("yes or not waited:", st.Yes+st.NotWaited, "failed:", st.Failed)
	// Output:
	// yes or not waited: 5 failed: 0
}

// A list at the lock key is someone else's data, not a lock: the error says
// so, and matches ErrWrongType.
func ExampleErrWrongType() {
	clients, stop := startNodes()
	defer stop()
	ctx := context.Background()
	for _, rc := range clients[:3] {
		if err := rc.(*redis.Client).RPush(ctx, "queue", "job-1").Err(); err != nil {
			log.Fatal(err)
		}
	}
	c, err := redlock.New(clients)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	_, err = c.TryLock(ctx, "queue")
	fmt.Println(errors.Is(err, redlock.ErrNotAcquired), errors.Is(err, redlock.ErrWrongType))
	// Output:
	// true true
}
