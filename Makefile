# make test is the one test command: the README documents it and .ci/run
# runs it. Recipes are plain POSIX sh.

GO = go

.PHONY: test check demo redis-server iptables valkey-server

# test installs redis-server and iptables when they are missing, so the
# real-Redis integration tests and the kernel partitions run rather than
# skip, then vets and runs every test
# under the race detector: the library, then the modules nested under
# contrib/ and bench/ (whose tests run the real redsync beside our
# readers and semaphores), which go test ./... does not reach.
test: redis-server iptables valkey-server
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 20m ./...
	REDIS_SERVER="$$(command -v valkey-server)" $(GO) test -race -count=1 -timeout 10m -run '$(VALKEY_TESTS)' .
	cd contrib/otel && $(GO) vet ./... && $(GO) test -race -count=1 ./...
	cd contrib/gocron && $(GO) vet ./... && $(GO) test -race -count=1 ./...
	@if [ -f bench/go.mod ]; then cd bench && $(GO) vet ./... && $(GO) test -race -count=1 ./...; fi

# check is the fast tier, for the edit-and-test loop: vet, then the
# deterministic tests (miniredis, the scripts, the option types) and one
# real-server smoke test (TestSmokeRealServers), without the race
# detector. go test -short skips every other real-server test and the
# chaos suite. make test still runs everything.
check:
	$(GO) vet ./...
	$(GO) test -short -count=1 ./...

# VALKEY_TESTS run a second time on Valkey 8, whose servers differ from
# Redis 7.0 where the library relies on server behaviour: WAIT after a
# command that writes nothing (Redis 7.2 and later), scripts, ACLs and
# pub/sub.
VALKEY_TESTS = TestWaitOffset|TestReplicaAck|TestLateAcquireCopy|TestManyLapsed|TestNaturalNames|TestPrefixScopedACL|TestCheckFindsACL|TestReleasePlainAgrees|TestReal|TestSemaphoreOnRealRedis|TestRWMixed|TestUncontendedCommands|TestCheckBadSetup|TestInspectBadSetup|TestCheckAuthAndACL|TestUnavailableWhenTooFewAnswer|TestAvailableWhenHeldElsewhere|TestWarnsOnce|TestWarnsAgain|TestRelease|TestTopUp|TestFsyncAck|TestCheckValkey|TestValidateFence|TestLockDelay|TestMinHold|TestFairScripts|TestFairFIFO|TestFairLeaves|TestElectionOneLeader|TestLeaderNoLeader|TestObserveSees|TestTermScript

# demo runs the embedded demo: 5 in-process Redis nodes, two killed partway.
demo:
	$(GO) run ./cmd/redlock demo

# redis-server installs redis-server (and, with it, redis-tools' redis-cli,
# which the cluster tests use) with apt-get when neither PATH nor
# REDIS_SERVER (which internal/redistest honours) provides one, or when
# redis-cli is missing. It uses sudo only when not root and sudo exists.
redis-server:
	@if { [ -n "$${REDIS_SERVER:-}" ] || command -v redis-server >/dev/null 2>&1; } && command -v redis-cli >/dev/null 2>&1; then \
		exit 0; \
	fi; \
	sudo=; \
	if [ "$$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then sudo=sudo; fi; \
	echo "redis-server not found: installing it with apt-get"; \
	$$sudo apt-get update && $$sudo apt-get install -y redis-server

# iptables installs iptables with apt-get when it is missing, for the
# kernel partitions of the chaos suite (chaos_partition_test.go), which
# also look in /usr/sbin and /sbin, where it lives outside a user's PATH.
# They need root as well: run as another user they skip, and fail with CI
# set. It uses sudo only when not root and sudo exists.
iptables:
	@if command -v iptables >/dev/null 2>&1 || [ -x /usr/sbin/iptables ] || [ -x /sbin/iptables ]; then \
		exit 0; \
	fi; \
	sudo=; \
	if [ "$$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then sudo=sudo; fi; \
	echo "iptables not found: installing it with apt-get"; \
	$$sudo apt-get update && $$sudo apt-get install -y iptables

# valkey-server installs Valkey 8 from Debian's backports suite when it is
# missing (.ci/install-valkey).
valkey-server:
	@sh .ci/install-valkey
