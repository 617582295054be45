package redlock_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock"
)

// ExampleWithFair queues three workers behind a holder, one after another,
// and shows that they get the lock in the order in which they began to
// wait.
func ExampleWithFair() {
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
	// Every caller of the key is fair: the Client's default.
	c, err := redlock.New(clients, redlock.WithFair(true), redlock.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	holder, err := c.Lock(ctx, "report")
	if err != nil {
		log.Fatal(err)
	}
	got := make(chan string)
	for _, name := range []string{"first", "second", "third"} {
		queued := make(chan struct{})
		once := false
		go func() {
			l, err := c.Lock(ctx, "report", redlock.WithQueuePlace(func(place int) {
				if !once {
					once = true
					fmt.Printf("%s waits at place %d\n", name, place)
					close(queued)
				}
			}))
			if err != nil {
				log.Fatal(err)
			}
			got <- name
			if err := l.Unlock(ctx); err != nil {
				log.Fatal(err)
			}
		}()
		<-queued // the next worker begins to wait after this one is queued
	}
	if err := holder.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	for range 3 {
		fmt.Println(<-got, "got the lock")
	}
	// Output:
	// first waits at place 1
	// second waits at place 2
	// third waits at place 3
	// first got the lock
	// second got the lock
	// third got the lock
}
