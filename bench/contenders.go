package main

import (
	"context"
	"fmt"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redlockgo/redlock"
)

// Names of the contenders, in the order every round runs them.
const (
	nameOurs        = "redlock"
	nameOursPolling = "redlock (polling)"
	// nameOursFair is redlock with WithFair(true) as the Client's default.
	nameOursFair = "redlock fair"
	// nameOursClients and nameOursFairClients are redlock and redlock fair
	// with one Client per goroutine, each on go-redis clients of its own:
	// the waiters of one key are then in as many Clients, as they are across
	// processes, and each Client's pub/sub wakes its own. Only (i) runs
	// them.
	nameOursClients     = "redlock, 16 Clients"
	nameOursFairClients = "redlock fair, 16 Clients"
	nameRedsync         = "redsync"
	nameFloor           = "plain floor"
	// namePipeFloor is the floor on go-redis's AutoPipeline: the reference
	// for a pipelined transport.
	namePipeFloor = "pipelined floor"
	// nameRueidisFloor is the floor on rueidis, sending the library's own
	// commands: the reference for what a lock+unlock could allocate.
	nameRueidisFloor = "rueidis floor"
	// nameOrderedFloor is the plain floor that never sends a release to a
	// node ahead of its SET's reply; only (a) runs it.
	nameOrderedFloor = "ordered floor"
	// nameRedsyncCtx is redsync on go-redis clients built with
	// ContextTimeoutEnabled, so that its 400 ms attempt deadline reaches
	// the socket reads; only the degraded measure runs it.
	nameRedsyncCtx = "redsync, ContextTimeoutEnabled"
)

// held is a lock a contender acquired. Every implementation is a pointer or
// a struct of one pointer, so the interface conversion does not allocate and
// the allocation counts are the library's own.
type held interface {
	Unlock(ctx context.Context) error
}

// contender is one lock client under test, with its own go-redis clients
// (the rueidis floor has its own rueidis clients instead).
type contender struct {
	name    string
	clients *clientSet // the rueidis floor's has no clients, only the sent counter
	lock    func(ctx context.Context, key string) (held, error)
	// lockBy, when set, is lock for the g-th goroutine of a measure: a
	// contender of several Clients gives each goroutine its own.
	lockBy func(ctx context.Context, g int, key string) (held, error)
	close  func() // ends the client and waits for its requests in flight
}

// lockAs takes the lock for the g-th goroutine of a measure.
func (c *contender) lockAs(ctx context.Context, g int, key string) (held, error) {
	if c.lockBy != nil {
		return c.lockBy(ctx, g, key)
	}
	return c.lock(ctx, key)
}

func newContender(name string, addrs []string, opts ...redlock.Option) (*contender, error) {
	var cs *clientSet
	switch name {
	case nameOursClients:
		return newClientsContender(name, addrs, contendG, opts...)
	case nameOursFairClients:
		return newClientsContender(name, addrs, contendG, append(opts, redlock.WithFair(true))...)
	case nameRedsyncCtx:
		cs = newClientSetWith(addrs, func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	case nameRueidisFloor:
		cs = &clientSet{} // no go-redis clients: only its sent counter
	default:
		cs = newClientSet(addrs)
	}
	c := &contender{name: name, clients: cs}
	switch name {
	case nameOurs, nameOursPolling, nameOursFair:
		switch name {
		case nameOursPolling:
			opts = append(opts, redlock.WithPubSub(false))
		case nameOursFair:
			opts = append(opts, redlock.WithFair(true))
		}
		rl, err := redlock.New(cs.universal(), opts...)
		if err != nil {
			cs.close()
			return nil, err
		}
		c.lock = func(ctx context.Context, key string) (held, error) {
			l, err := rl.Lock(ctx, key)
			if err != nil {
				return nil, err
			}
			return l, nil
		}
		c.close = func() {
			_ = rl.Close()
			cs.close()
		}
	case nameRedsync, nameRedsyncCtx:
		pools := make([]redsyncredis.Pool, len(cs.clients))
		for i, rc := range cs.clients {
			pools[i] = goredis.NewPool(rc)
		}
		rs := redsync.New(pools...)
		c.lock = func(ctx context.Context, key string) (held, error) {
			m := rs.NewMutex(key)
			if err := m.LockContext(ctx); err != nil {
				return nil, err
			}
			return redsyncHeld{m}, nil
		}
		// redsync does not track its requests; closing the clients makes
		// any still in flight fail at once.
		c.close = cs.close
	case nameFloor, namePipeFloor, nameOrderedFloor:
		var f *floor
		if name != namePipeFloor {
			nodes := make([]redis.Cmdable, len(cs.clients))
			for i, rc := range cs.clients {
				nodes[i] = rc
			}
			f = newFloor(nodes)
			f.ordered = name == nameOrderedFloor
		} else {
			var err error
			if f, err = newPipelinedFloor(cs.clients); err != nil {
				cs.close()
				return nil, err
			}
		}
		c.lock = func(ctx context.Context, key string) (held, error) {
			l, err := f.Lock(ctx, key)
			if err != nil {
				return nil, err
			}
			return l, nil
		}
		c.close = func() {
			f.wg.Wait()
			cs.close()
		}
	case nameRueidisFloor:
		f, err := newRueidisFloor(addrs, &cs.sent)
		if err != nil {
			return nil, err
		}
		c.lock = func(ctx context.Context, key string) (held, error) {
			l, err := f.Lock(ctx, key)
			if err != nil {
				return nil, err
			}
			return l, nil
		}
		c.close = f.close
	default:
		cs.close()
		return nil, fmt.Errorf("bench: unknown contender %q", name)
	}
	return c, nil
}

// newClientsContender builds n redlock Clients on addrs, each on go-redis
// clients of its own, whose commands all count into one counter. Its lock
// uses the first Client; lockBy gives goroutine g Client g mod n.
func newClientsContender(name string, addrs []string, n int, opts ...redlock.Option) (*contender, error) {
	cs := &clientSet{}
	rls := make([]*redlock.Client, 0, n)
	end := func() {
		for _, rl := range rls {
			_ = rl.Close()
		}
		cs.close()
	}
	for range n {
		nodes := make([]redis.UniversalClient, len(addrs))
		for i, a := range addrs {
			rc := redis.NewClient(&redis.Options{Addr: a})
			rc.AddHook(&cs.sent)
			cs.clients = append(cs.clients, rc)
			nodes[i] = rc
		}
		rl, err := redlock.New(nodes, opts...)
		if err != nil {
			end()
			return nil, err
		}
		rls = append(rls, rl)
	}
	lockBy := func(ctx context.Context, g int, key string) (held, error) {
		l, err := rls[g%len(rls)].Lock(ctx, key)
		if err != nil {
			return nil, err
		}
		return l, nil
	}
	return &contender{
		name:    name,
		clients: cs,
		lock:    func(ctx context.Context, key string) (held, error) { return lockBy(ctx, 0, key) },
		lockBy:  lockBy,
		close:   end,
	}, nil
}

type redsyncHeld struct{ m *redsync.Mutex }

func (h redsyncHeld) Unlock(ctx context.Context) error {
	ok, err := h.m.UnlockContext(ctx)
	if err == nil && !ok {
		err = redsync.ErrFailed
	}
	return err
}

// contenders builds one contender per name, on the same nodes.
func contenders(addrs []string, names ...string) ([]*contender, error) {
	var cs []*contender
	for _, n := range names {
		c, err := newContender(n, addrs)
		if err != nil {
			closeAll(cs)
			return nil, err
		}
		cs = append(cs, c)
	}
	return cs, nil
}

func closeAll(cs []*contender) {
	for _, c := range cs {
		c.close()
	}
}
