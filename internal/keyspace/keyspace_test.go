package keyspace

import (
	"math/rand/v2"
	"strings"
	"testing"
)

func TestEverySlotHasATag(t *testing.T) {
	for s := range 16384 {
		tg := tag(uint16(s))
		if tg == "" || Slot(tg) != uint16(s) {
			t.Fatalf("slot %d: tag %q is in slot %d, want %d", s, tg, Slot(tg), s)
		}
	}
}

// TestReservedIsUnbordered checks what the package doc's argument needs:
// no proper prefix of Reserved is also a suffix of it.
func TestReservedIsUnbordered(t *testing.T) {
	for n := 1; n < len(Reserved); n++ {
		if Reserved[:n] == Reserved[len(Reserved)-n:] {
			t.Fatalf("Reserved has a border %q", Reserved[:n])
		}
	}
}

// keyGen makes keys that look like each other and like derived names.
func keyGen(r *rand.Rand) string {
	parts := []string{"jobs", ":", "{", "}", "{q1}", "waiting", ":waiting", ":fence", "fence", "\x00", "redlock", "redlock:",
		"\x00redlock", "released", "a", "b", "lk:", "{}", "\xff", "é", strings.Repeat("x", 300)}
	var b strings.Builder
	for range 1 + r.IntN(6) {
		b.WriteString(parts[r.IntN(len(parts))])
	}
	return b.String()
}

func TestDerivedNames(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	seen := map[string]string{}
	lockKeys := map[string]bool{}
	var keys []string
	for range 1500 {
		k := keyGen(r)
		if Check(k) != nil {
			if !strings.Contains(k, Reserved) {
				t.Fatalf("Check refused %q, which does not contain Reserved", k)
			}
			continue
		}
		keys = append(keys, k)
		lockKeys[k] = true
	}
	for _, k := range keys {
		names := []string{Waiting(k), Fence(k), Channel(k), Barrier(k), Ticket(k), Queue(k), Deadline(k), Term(k), Elected(k)}
		for _, d := range names {
			if !strings.HasPrefix(d, k) {
				t.Fatalf("derived %q does not start with its lock key %q", d, k)
			}
			if Check(d) == nil {
				t.Fatalf("derived %q of %q passes Check: a user could lock it", d, k)
			}
			if lockKeys[d] {
				t.Fatalf("derived %q of %q is also a lock key", d, k)
			}
			if o, dup := seen[d]; dup && o != k {
				t.Fatalf("derived %q names both %q and %q", d, o, k)
			}
			seen[d] = k
			if Slot(d) != Slot(k) {
				t.Fatalf("derived %q is in slot %d, its lock key %q in %d", d, Slot(d), k, Slot(k))
			}
		}
		distinct := map[string]bool{}
		for _, d := range names {
			distinct[d] = true
		}
		if len(distinct) != len(names) {
			t.Fatalf("derived names of %q coincide: %q", k, names)
		}
	}
}

func TestNaturalNames(t *testing.T) {
	for _, k := range []string{"jobs:{q1}", "jobs:{q1}:waiting", "acct", "{acct}:fence", "lk:a{b", "lk:{}x", "lk:a}b"} {
		if err := Check(k); err != nil {
			t.Fatalf("Check(%q) = %v, want nil", k, err)
		}
	}
	if got, want := Waiting("lk:jobs:{q1}"), "lk:jobs:{q1}\x00redlock:waiting"; got != want {
		t.Fatalf("Waiting = %q, want %q", got, want)
	}
	if got := Fence("lk:acct"); !strings.HasPrefix(got, "lk:acct\x00redlock:fence{") {
		t.Fatalf("Fence = %q, want lk:acct\\x00redlock:fence{...}", got)
	}
}

func BenchmarkWaiting(b *testing.B) {
	tags()
	for b.Loop() {
		_ = Waiting("lk:orders:42")
	}
}

func BenchmarkWaitingOddBraces(b *testing.B) {
	tags()
	for b.Loop() {
		_ = Waiting("lk:a{b")
	}
}

// TestSlotKnownValues checks Slot against slots Redis gives (CLUSTER
// KEYSLOT).
func TestSlotKnownValues(t *testing.T) {
	for k, want := range map[string]uint16{"foo": 12182, "bar": 5061, "{user1000}.following": 3443, "hello": 866, "": 0} {
		if got := Slot(k); got != want {
			t.Fatalf("Slot(%q) = %d, want %d", k, got, want)
		}
	}
}
