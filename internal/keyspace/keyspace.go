// Package keyspace names the keys and channels that redlock derives from a
// lock key: the waiting marker, the fence counter, the release channel, the
// barrier, a fair lock's ticket counter and queue, and an election's term
// record and channel.
//
// A derived name is the lock key, then Reserved, then what it is, then a
// hash tag when the lock key has none:
//
//	lk:jobs:{q1}\x00redlock:waiting
//	lk:acct\x00redlock:fence{1Ab}
//
// Three properties follow, and the tests check them:
//
//   - A derived name starts with the lock key, and so with the Client's key
//     prefix: a prefix-scoped ACL (~prefix* for keys, &prefix* for
//     channels) covers it.
//   - No lock key can be a derived name, nor two lock keys share one: a
//     derived name contains Reserved, which Check refuses in lock keys, and
//     Reserved's first byte occurs nowhere else in it, so the first
//     occurrence of Reserved in a derived name ends the lock key.
//   - A derived name is in the lock key's hash slot of a Redis Cluster, so
//     that one script, or one shard channel, reaches both. A lock key with
//     a hash tag keeps it, since the tag closes before Reserved. A lock key
//     without one gets a short tag of its own whose slot is the key's.
package keyspace

import (
	"fmt"
	"strings"
	"sync"
)

// Reserved is the byte sequence that every derived name contains and that
// no lock key may contain. It starts with a NUL byte, so that no text key
// ever holds it, and that byte occurs only once in it (see the package
// doc).
const Reserved = "\x00redlock:"

// The kinds of derived names. None is a prefix of another, and none
// contains a brace.
const (
	waiting    = "waiting"
	fence      = "fence"
	released   = "released"
	replicated = "replicated"
	ticket     = "ticket"
	queue      = "queue"
	deadline   = "deadline"
	term       = "term"
	elected    = "elected"
)

// Check returns an error when key, a lock key with its prefix, contains
// Reserved. The error names the rule.
func Check(key string) error {
	if strings.Contains(key, Reserved) {
		return fmt.Errorf("key %q contains %q, which redlock reserves for the names it derives from lock keys", key, Reserved)
	}
	return nil
}

// Waiting names the marker that waiting Lock calls set beside key, so that
// its release is announced only when someone may be waiting.
func Waiting(key string) string { return derive(key, waiting) }

// Fence names the fence counter of key.
func Fence(key string) string { return derive(key, fence) }

// Channel names the pub/sub channel on which the release of key is
// announced. On a Redis Cluster node the same name is used as a shard
// channel (SPUBLISH), in key's hash slot.
func Channel(key string) string { return derive(key, released) }

// Barrier names the barrier of a batch that waits for acknowledgements, a
// channel and a key of the same name (Redis keeps the two apart). A batch
// that waits for replicas (WAIT) first publishes on the channel, with
// nobody listening: PUBLISH is replicated, so it moves the connection's
// WAIT offset past every write the server made before it, which a command
// that writes nothing does not do from Redis 7.2 on. A batch that waits for
// an fsync (WAITAOF) first sets the key, to an empty string that expires
// after a millisecond: PUBLISH never reaches the append-only file, while a
// SET always does, so WAITAOF then waits for an fsync past every earlier
// write. Nothing else uses the key, and it is gone at once.
func Barrier(key string) string { return derive(key, replicated) }

// Ticket names the ticket counter of key: the quorum-monotonic counter
// that orders the fair waiters of key (see docs/FAIRNESS.md). Like the
// fence counter it never expires.
func Ticket(key string) string { return derive(key, ticket) }

// Queue names the sorted set of key's fair waiters on a node: each
// waiting call's id, scored by its ticket.
func Queue(key string) string { return derive(key, queue) }

// Deadline names the sorted set of the expiry times, in node milliseconds,
// of the entries of key's Queue, and of the tombstones of fair calls that
// ended.
func Deadline(key string) string { return derive(key, deadline) }

// Term names the term record of an election on key: the term, the token
// and the value of the leader that the record names.
func Term(key string) string { return derive(key, term) }

// Elected names the pub/sub channel on which a new term of an election on
// key is announced (a shard channel on a Redis Cluster node).
func Elected(key string) string { return derive(key, elected) }

func derive(key, kind string) string {
	return key + Reserved + kind + slotTag(key, kind)
}

// slotTag is what follows a derived name of key, so that the name is in
// key's hash slot: nothing when key has a hash tag, which the name then
// shares, else {t} with a short t whose slot is key's.
func slotTag(key, kind string) string {
	if HashTag(key) != key {
		return ""
	}
	slot := Slot(key)
	if !strings.Contains(key, "{") {
		// The name's first brace is the tag's: its slot is t's.
		return "{" + tag(slot) + "}"
	}
	// key has a brace but no tag ("a{b", "{}x"): the name's tag depends on
	// key's own brace, so search for a t that lands the whole name in
	// key's slot. Such keys are rare; this costs well under a millisecond.
	if t := searchTag(key+Reserved+kind, slot); t != "" {
		return "{" + t + "}"
	}
	// A name in another slot only matters on a Redis Cluster, which then
	// refuses the script with CROSSSLOT: Client.checkKeys refuses such keys
	// there.
	return ""
}

// tagAlphabet makes the tags: no brace, nothing a shell or a log quotes.
const tagAlphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// numCandidates is how many candidate tags there are: every string of one
// to three characters of tagAlphabet, shortest first. Some candidate lands
// in every slot (TestEverySlotHasATag).
const numCandidates = 62 + 62*62 + 62*62*62

// candidate returns candidate tag i, for i below numCandidates, in buf.
func candidate(buf *[3]byte, i int) []byte {
	n := 1
	for size := len(tagAlphabet); i >= size; size *= len(tagAlphabet) {
		i -= size
		n++
	}
	for j := n - 1; j >= 0; j-- {
		buf[j] = tagAlphabet[i%len(tagAlphabet)]
		i /= len(tagAlphabet)
	}
	return buf[:n]
}

// searchTag returns the first candidate tag t for which base+"{"+t+"}" is
// in slot, where base is a lock key with a brace but no hash tag, then
// Reserved and a kind. Such a name's tag starts at the key's first brace:
// with no } after it in base, the name's tag is the rest of base, then {
// and t; with one right after it (an empty tag), the whole name is hashed.
// Either way the CRC of the fixed part is computed once, and each candidate
// costs a few more bytes of it.
func searchTag(base string, slot uint16) string {
	s := strings.IndexByte(base, '{')
	fixed, closing := base+"{", ""
	if strings.IndexByte(base[s+1:], '}') < 0 {
		fixed = base[s+1:] + "{"
	} else {
		closing = "}"
	}
	start := crcUpdate(0, fixed)
	var buf [3]byte
	for i := range numCandidates {
		t := candidate(&buf, i)
		if crcUpdate(crcUpdate(start, string(t)), closing)%16384 == slot {
			return string(t)
		}
	}
	return ""
}

// tags maps each hash slot to the first candidate tag in it, kept as a
// length and up to three bytes, so that the table costs 64 KiB.
var tags = sync.OnceValue(func() *[16384][4]byte {
	var t [16384][4]byte
	var buf [3]byte
	left := len(t)
	for i := 0; i < numCandidates && left > 0; i++ {
		c := candidate(&buf, i)
		if s := Slot(string(c)); t[s][0] == 0 {
			t[s][0] = byte(len(c))
			copy(t[s][1:], c)
			left--
		}
	}
	return &t
})

// tag returns the first candidate tag in slot.
func tag(slot uint16) string {
	e := &tags()[slot]
	return string(e[1 : 1+e[0]])
}

// HashTag returns the part of key that Redis Cluster hashes: the text
// between the first { and the next }, when that is not empty, else the whole
// key.
func HashTag(key string) string {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			return key[s+1 : s+1+e]
		}
	}
	return key
}

// Slot is the Redis Cluster hash slot of key: CRC16 (XMODEM) of its hash
// tag, modulo 16384.
func Slot(key string) uint16 {
	return crcUpdate(0, HashTag(key)) % 16384
}

// crcUpdate continues the CRC16 (XMODEM) crc over b.
func crcUpdate(crc uint16, b string) uint16 {
	for i := 0; i < len(b); i++ {
		crc = crc<<8 ^ crcTable[byte(crc>>8)^b[i]]
	}
	return crc
}

// crcTable is the CRC16 (XMODEM, polynomial 0x1021) of each byte.
var crcTable = func() (t [256]uint16) {
	for i := range t {
		crc := uint16(i) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[i] = crc
	}
	return t
}()
