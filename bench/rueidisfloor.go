package main

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/redis/rueidis"

	"github.com/redlockgo/redlock/internal/keyspace"
)

// rueidisFloor is a floor, not a library: the fewest allocations a Redlock
// client could cost on another Redis client, rueidis, whose commands are
// built in pooled slices and whose replies are plain values. It sends what
// the library sends for an uncontended lock+unlock, on every node:
//
//	SET key value PX ttl NX
//	EVALSHA sha1(releaseplain.lua) 2 key waiting-marker value release-channel
//
// with the value a UUID, the TTL and drift allowance the library's defaults,
// and the marker and channel named by internal/keyspace, as the library
// names them. Each command goes to every node at once, one goroutine each as
// the plain floor does, and the decision is taken at the quorum-th reply
// (or once the quorum is out of reach), validity checked. A failed Lock
// releases on every node, with no channel, as the library's rollback does.
// Like the library and the ordered floor, it never sends a release to a node
// ahead of that node's reply to the SET: the SET's goroutine sends it once
// the reply came. It makes no retries, has no timeouts of its own, and keeps
// no state beyond the value and those replies: everything the library does
// beyond that is what the library costs over this floor.
//
// Each node has one rueidis client with its defaults, apart from
// ForceSingleClient (no CLUSTER probe) and DisableCache (no client-side
// cache, which the commands never use): every command to a node goes
// through one auto-pipelined connection.
type rueidisFloor struct {
	nodes  []rueidis.Client
	quorum int
	ttl    time.Duration
	ttlArg string // the TTL in milliseconds, formatted once
	drift  time.Duration
	sent   *sentCounter // counts the commands sent, as the go-redis hooks do for the others
	wg     sync.WaitGroup
}

// maxRueidisNodes is the most nodes the rueidis floor takes, the most any
// measure uses: a lock keeps its nodes' state inline, so that the state
// costs no allocation of its own.
const maxRueidisNodes = 9

var (
	// rueidisReleasePlainSrc is the library's scripts/releaseplain.lua,
	// byte for byte, so that the EVALSHA names the script the library
	// loads (TestRueidisFloorReleaseIsTheLibrarys checks the copy, and
	// TestRueidisFloorSendsTheLibrarysCommands the SHA).
	//go:embed releaseplain.lua
	rueidisReleasePlainSrc string
	rueidisReleasePlain    = rueidis.NewLuaScript(rueidisReleasePlainSrc)
)

// newRueidisFloor connects one rueidis client to each address. On failure
// the clients made so far are closed.
func newRueidisFloor(addrs []string, sent *sentCounter) (*rueidisFloor, error) {
	if len(addrs) > maxRueidisNodes {
		return nil, fmt.Errorf("bench: the rueidis floor takes at most %d nodes, got %d", maxRueidisNodes, len(addrs))
	}
	const ttl = 10 * time.Second // redlock.DefaultTTL
	f := &rueidisFloor{
		quorum: len(addrs)/2 + 1,
		ttl:    ttl,
		ttlArg: strconv.FormatInt(ttl.Milliseconds(), 10),
		drift:  ttl/100 + 2*time.Millisecond, // redlock.DefaultDriftFactor
		sent:   sent,
	}
	for i, a := range addrs {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{a}, ForceSingleClient: true, DisableCache: true})
		if err != nil {
			f.close()
			return nil, fmt.Errorf("bench: rueidis client of node %d: %w", i, err)
		}
		f.nodes = append(f.nodes, c)
	}
	return f, nil
}

// close waits for the requests in flight, then closes the clients.
func (f *rueidisFloor) close() {
	f.wg.Wait()
	for _, c := range f.nodes {
		c.Close()
	}
}

// The states of a node's SET in a rueidisFloorLock.
const (
	setPending   int32 = iota // sent, not answered
	setAnswered               // answered: a release may go
	releaseWaits              // a release came first: the SET's goroutine sends it
)

type rueidisFloorLock struct {
	f          *rueidisFloor
	key, value string
	state      [maxRueidisNodes]atomic.Int32
	// rel is the release, written before any state becomes releaseWaits,
	// and read by a SET's goroutine only once it saw that state.
	rel struct {
		keys, args [2]string
		votes      chan bool
	}
}

// Lock makes one attempt to take key on a quorum of the nodes.
func (f *rueidisFloor) Lock(ctx context.Context, key string) (*rueidisFloorLock, error) {
	l := &rueidisFloorLock{f: f, key: key, value: uuid.NewString()}
	start := time.Now()
	ch := make(chan bool, len(f.nodes))
	f.wg.Add(len(f.nodes))
	for i, n := range f.nodes {
		go func() {
			defer f.wg.Done()
			f.sent.add(1)
			// The library's layout, which the typed builder cannot
			// write (it puts NX before PX). The name is upper case:
			// Build upper-cases it, which would copy "set".
			cmd := n.B().Arbitrary("SET").Keys(key).Args(l.value, "px", f.ttlArg, "nx").Build()
			ok := n.Do(ctx, cmd).Error() == nil // a nil reply: held by another
			if !l.state[i].CompareAndSwap(setPending, setAnswered) {
				// The release came first (and the vote is moot).
				l.release(ctx, n)
				return
			}
			ch <- ok
		}()
	}
	if quorumOf(ch, len(f.nodes), f.quorum) && time.Since(start) < f.ttl-f.drift {
		return l, nil
	}
	_ = l.releaseAll(context.WithoutCancel(ctx), "")
	return nil, errFloorNotAcquired
}

// Unlock releases the lock on every node, and announces it on the key's
// release channel where a waiter left its marker, as the library's Unlock
// does; it succeeds once a quorum released.
func (l *rueidisFloorLock) Unlock(ctx context.Context) error {
	return l.releaseAll(ctx, keyspace.Channel(l.key))
}

// releaseAll runs releaseplain.lua on every node with the given channel (""
// for a rollback), and reports whether a quorum held the value. A node whose
// SET has not answered gets its release from the SET's goroutine.
func (l *rueidisFloorLock) releaseAll(ctx context.Context, channel string) error {
	f := l.f
	l.rel.keys = [2]string{l.key, keyspace.Waiting(l.key)}
	l.rel.args = [2]string{l.value, channel}
	l.rel.votes = make(chan bool, len(f.nodes))
	for i, n := range f.nodes {
		if l.state[i].CompareAndSwap(setPending, releaseWaits) {
			continue
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			l.release(ctx, n)
		}()
	}
	if !quorumOf(l.rel.votes, len(f.nodes), f.quorum) {
		return errFloorNotAcquired
	}
	return nil
}

// release runs the release on one node, and votes.
func (l *rueidisFloorLock) release(ctx context.Context, n rueidis.Client) {
	l.f.sent.add(1)
	v, err := rueidisReleasePlain.Exec(ctx, n, l.rel.keys[:], l.rel.args[:]).AsInt64()
	l.rel.votes <- err == nil && v == 1
}

// quorumOf reads the votes of n nodes from ch until quorum of them said yes,
// or enough said no that quorum is out of reach, and reports which.
func quorumOf(ch <-chan bool, n, quorum int) bool {
	yes, no := 0, 0
	for yes < quorum && no <= n-quorum {
		if <-ch {
			yes++
		} else {
			no++
		}
	}
	return yes >= quorum
}
