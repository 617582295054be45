package redlockgocron_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-co-op/gocron/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock"
	redlockgocron "github.com/redlockgo/redlock/contrib/gocron"
)

func ExampleNewLocker() {
	nodes, stop := startNodes()
	defer stop()
	c, err := redlock.New(nodes)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// Every scheduler that runs the job has a Locker like this one. The
	// splay is how far apart their triggers of one run may fire: less than
	// the job's interval.
	locker, err := redlockgocron.NewLocker(c, redlockgocron.WithSplay(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = s.Shutdown() }()

	ran := make(chan string, 1)
	job, err := s.NewJob(
		gocron.CronJob("0 3 * * *", false), // every day at 03:00
		gocron.NewTask(func() {
			select {
			case ran <- "report ran":
			default:
			}
		}),
		gocron.WithName("daily-report"), // the lock key: gocron:daily-report
	)
	if err != nil {
		log.Fatal(err)
	}
	s.Start()

	// Run it now rather than wait for 03:00: it takes the lock as every
	// run does.
	if err := job.RunNow(); err != nil {
		log.Fatal(err)
	}
	fmt.Println(<-ran)
	// Output: report ran
}

func ExampleNewElector() {
	ctx := context.Background()
	nodes, stop := startNodes()
	defer stop()
	c, err := redlock.New(nodes, redlock.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// Every scheduler campaigns on the same election, with its own value.
	election, err := c.Election("reports-leader")
	if err != nil {
		log.Fatal(err)
	}
	elector, err := redlockgocron.NewElector(election, "host-1", redlockgocron.WithSplay(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	if err := elector.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer elector.Close() // resigns, so that another scheduler takes over at once

	s, err := gocron.NewScheduler(gocron.WithDistributedElector(elector))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = s.Shutdown() }()
	ran := make(chan uint64, 1)
	job, err := s.NewJob(
		gocron.CronJob("0 3 * * *", false),
		gocron.NewTask(func() {
			// The Term fences the job's writes: a later leader's is larger.
			term, err := elector.Term()
			if err != nil {
				return // leadership lost since the run began
			}
			select {
			case ran <- term:
			default:
			}
		}),
		gocron.WithName("daily-report"),
	)
	if err != nil {
		log.Fatal(err)
	}
	s.Start()

	// Wait until this scheduler leads jobs: it is the only one here.
	for elector.IsLeader(ctx) != nil {
		time.Sleep(10 * time.Millisecond)
	}
	if err := job.RunNow(); err != nil {
		log.Fatal(err)
	}
	term := <-ran
	fmt.Println("report ran, with a term:", term > 0)
	// Output: report ran, with a term: true
}

// startNodes starts 5 in-process Redis masters and returns a go-redis
// client for each. In production they are 5 real Redis servers on separate
// machines. stop closes the clients, then the servers.
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
		if err := rc.Ping(context.Background()).Err(); err != nil {
			stop()
			log.Fatal(err)
		}
	}
	return clients, stop
}
