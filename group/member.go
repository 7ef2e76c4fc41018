package group

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/chatpulse/chatpulse/aggregator"
	"github.com/chatpulse/chatpulse/bus"
	"github.com/chatpulse/chatpulse/chat"
	"github.com/chatpulse/chatpulse/engine"
	"github.com/chatpulse/chatpulse/group/lease"
	"github.com/chatpulse/chatpulse/ingest"
	"github.com/chatpulse/chatpulse/rolling"
	"github.com/chatpulse/chatpulse/throttle"
)

// DefaultLease is how long a member's keys live after its last write: a
// member that dies has its partitions taken over within about this, plus
// their replay.
const DefaultLease = 4 * time.Second

// Config is one member's configuration: an engine's, and the group's.
type Config struct {
	engine.Config // Instance names the member
	Group         string
	Partitions    int
	Lease         time.Duration // 0: DefaultLease
	// Unowned is how a throttle check is answered while a stage it needs
	// has no caught-up owner: UnownedAllow (the default) or UnownedDeny.
	Unowned string
}

// The answers of a check without an owner (--throttle-unowned).
const (
	UnownedAllow = "allow"
	UnownedDeny  = "deny"
)

// ErrConfig is a configuration that cannot work (the caller exits with
// status 2): a name that is not allowed, a --partitions other than the
// group's, an instance name a live member already has.
var ErrConfig = errors.New("group configuration")

var namePattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
var instancePattern = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}$`)

// A Member is this instance's part in a group (an engine.Engine): the
// partitions it holds, the pipeline that counts their events, and the
// answers it gives.
type Member struct {
	cfg     Config
	bus     *bus.Bus
	log     *slog.Logger
	rules   atomic.Pointer[rules]  // the policies in force; Reconfigure changes them
	windows *aggregator.Aggregator // answers Windows; counts nothing

	leases   *lease.Loop
	progress *progress
	consumer *ingest.Consumer
	feeds    *bus.Feeds     // every partition's stages, into the one pipeline
	filer    *filer         // nil: the group reads chatpulse's own events only
	keeper   *engine.Keeper // nil: no snapshots
	reg      prometheus.Registerer
	query    *nats.Subscription
	alerts   *nats.Subscription
	metrics  *metrics
	starts   *prometheus.CounterVec // partition starts, by how
	// Consuming checks' undos not confirmed, tried again (unconsume);
	// closing ends their tries.
	undos           sync.WaitGroup
	closing         chan struct{}
	unconsumeFailed prometheus.Counter

	parts *partitions // the partitions it runs and parked

	mu      sync.Mutex // guards filing and running
	running bool       // Run was called
	filing  *filing    // this member holds the filer's lease

	cancel context.CancelFunc
	done   chan struct{}
}

var _ engine.Engine = (*Member)(nil)

// New makes a member from its configuration; nothing touches the network
// until Attach.
func New(cfg Config, reg prometheus.Registerer) (*Member, error) {
	if cfg.Lease == 0 {
		cfg.Lease = DefaultLease
	}
	cfg.Defaults()
	switch {
	case !namePattern.MatchString(cfg.Group):
		return nil, fmt.Errorf("%w: --group %q: 1 to 64 letters, digits, '_' or '-'", ErrConfig, cfg.Group)
	case !instancePattern.MatchString(cfg.Instance):
		return nil, fmt.Errorf("%w: --instance %q: 1 to 128 letters, digits, '_', '-' or '.', not starting with '.'", ErrConfig, cfg.Instance)
	case cfg.Partitions < 1 || cfg.Partitions > 1024:
		return nil, fmt.Errorf("%w: --partitions %d: 1 to 1024", ErrConfig, cfg.Partitions)
	case cfg.Unowned != "" && cfg.Unowned != UnownedAllow && cfg.Unowned != UnownedDeny:
		return nil, fmt.Errorf("%w: --throttle-unowned %q: allow or deny", ErrConfig, cfg.Unowned)
	}
	m := &Member{cfg: cfg, log: cfg.Log, done: make(chan struct{}), closing: make(chan struct{})}
	var err error
	if m.windows, err = aggregator.New(cfg.Windows); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	r, err := newRules(cfg.Policies)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	m.rules.Store(r)
	format := ingest.Native()
	if cfg.SourceStream != "" {
		format = cfg.Input.Filed() // what the filer files (docs/contract.md section 13)
	}
	m.consumer = ingest.New(reg, ingest.Config{
		Format: format, Own: bus.OwnPrefix, MaxSkew: cfg.MaxSkew, Now: cfg.Now, Log: cfg.Log,
		OnReject: m.deadLetter,
		OnAlert:  func(a throttle.Alert) { m.bus.Alert(a) }, // every member's dashboards hear it back from NATS; stage.Handled fences it
	})
	if cfg.SourceStream != "" {
		m.filer = newFiler(cfg, m.consumer, reg)
	}
	m.metrics = newMetrics(m, reg)
	m.starts = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "chatpulse_group_partition_starts_total",
		Help: "Partitions this member started, by how: from their snapshot, by reading one largest window again, or warm (resumed from the state it kept when it lost their lease)."}, []string{"how"})
	for _, how := range []string{startSnapshot, startReplay, startWarm} {
		m.starts.WithLabelValues(how)
	}
	m.unconsumeFailed = prometheus.NewCounter(prometheus.CounterOpts{Name: "chatpulse_group_unconsume_failed_total",
		Help: "Hits of consuming checks that a later stage denied, whose undo no owner confirmed: each stays counted until it leaves its policies' windows."})
	reg.MustRegister(m.starts, m.unconsumeFailed)
	m.reg = reg
	m.parts = &partitions{self: cfg.Instance, lease: cfg.Lease, stream: cfg.Stream, subject: cfg.Subject, restore: m.restore, fresh: m.stages,
		from: cfg.ReplayFrom, starts: m.starts, log: cfg.Log, runs: map[int]*partition{}, parked: map[int]*partition{}, retired: map[string]throttle.PolicyStats{}}
	return m, nil
}

// deadLetter publishes the dead letter of a message of a partition that
// may still act.
func (m *Member) deadLetter(msg *ingest.Msg, err *ingest.Error) {
	s, ok := msg.Sink.(*stage)
	if !ok {
		m.bus.DeadLetter(msg, err)
		return
	}
	kept := *msg
	s.act(func() { // or its next holder handles it again
		if m.filer == nil || !m.filer.deadLetterFiled(&kept, err) {
			m.bus.DeadLetter(&kept, err)
		}
	})
}

// Attach joins the group over b: it checks the configuration against the
// group's, makes the partitioned stream and the group's buckets, and takes
// this member's name; httpURL is where the others say it serves. Nothing
// is read or answered until Run. A configuration that cannot work is
// ErrConfig.
func (m *Member) Attach(ctx context.Context, b *bus.Bus, httpURL string) error {
	cfg := m.cfg
	m.bus = b
	m.feeds = b.NewFeeds()
	if err := agree(ctx, b, cfg.Group, settings{Partitions: cfg.Partitions, Windows: windowNames(cfg.Windows)}, cfg.Replicas); err != nil {
		if errors.Is(err, ErrPartitions) {
			return fmt.Errorf("%w: %v", ErrConfig, err)
		}
		return err
	}
	stream := cfg.StreamConfig()
	stream.Source = "" // the filer's copy sources it
	if err := b.EnsureStreams(ctx, stream, cfg.Partitions); err != nil {
		if errors.Is(err, bus.ErrPartitioned) {
			return fmt.Errorf("%w: %v", ErrConfig, err)
		}
		return err
	}
	slots := cfg.Partitions // the leases: one per partition, and the filer's
	if cfg.SourceStream != "" {
		if err := m.attachFiler(ctx, stream); err != nil {
			return err
		}
		slots++
	}
	if cfg.SnapshotInterval > 0 {
		store, err := b.Snapshots(ctx, cfg.Replicas)
		if err != nil {
			return err
		}
		m.keeper = engine.NewKeeper(store, engine.ConfigOf(cfg.Windows, m.rules.Load().policies, cfg.Partitions), cfg.Stream, m.reg, cfg.Log)
	}
	if err := b.GroupAlerts(ctx, cfg.Group, cfg.Replicas); err != nil {
		return err
	}
	kv, err := lease.Open(ctx, b, cfg.Group, cfg.Replicas, cfg.Lease)
	if err != nil {
		return err
	}
	if m.progress, err = openProgress(ctx, b, cfg.Group, cfg.Replicas); err != nil {
		return err
	}
	if m.filer != nil {
		m.filer.progress = m.progress
	}
	m.leases = lease.New(kv, lease.Config{Self: lease.Member{Instance: cfg.Instance, HTTP: httpURL}, Slots: slots, TTL: cfg.Lease,
		Hand: hand{m}, Log: cfg.Log, Lag: m.lag, Stamp: cfg.Now, MaxSkew: cfg.MaxSkew})
	ps := m.parts
	ps.leases, ps.prog, ps.feeds = m.leases, m.progress, busFeeds{m.feeds}
	ps.seqs = func(ctx context.Context) (uint64, uint64, error) { return b.Seqs(ctx, cfg.Stream) }
	if err := m.leases.Join(ctx); err != nil {
		if errors.Is(err, lease.ErrDuplicate) {
			return fmt.Errorf("%w: --instance %s: %v (group %s)", ErrConfig, cfg.Instance, err, cfg.Group)
		}
		return err
	}
	return nil
}

func windowNames(ws []rolling.Window) string {
	s := ""
	for i, w := range ws {
		if i > 0 {
			s += ","
		}
		s += w.Name + ":" + rolling.FormatDuration(w.Res)
	}
	return s
}

// Run starts answering the group's questions, counting and taking
// partitions, until Close. Every member's alerts, its own included, reach
// alerts from NATS.
func (m *Member) Run(alerts func(throttle.Alert)) error {
	var err error
	if m.alerts, err = m.bus.SubscribeAlerts(alerts); err != nil {
		return fmt.Errorf("alerts: %w", err)
	}
	sub, err := m.bus.Answer(bus.GroupQuery(m.cfg.Group, chat.Token(m.cfg.Instance)), m.serve)
	if err != nil {
		return fmt.Errorf("group %s: questions: %w", m.cfg.Group, err)
	}
	m.query = sub
	m.mu.Lock()
	m.running = true
	m.mu.Unlock()
	m.consumer.Start(m.feeds.Source())
	var ctx context.Context
	ctx, m.cancel = context.WithCancel(context.Background())
	go func() {
		defer close(m.done)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); m.parts.record(ctx) }()
		if m.keeper != nil {
			wg.Add(1)
			go func() { defer wg.Done(); m.keeper.Run(ctx, m.cfg.SnapshotInterval, m.consumer.Pause, m.snapshots) }()
		}
		if err := m.leases.Run(ctx); err != nil {
			m.log.Error("group: leases", "err", err)
		}
		wg.Wait()
	}()
	return nil
}

// Close gives up every partition (the others take them over at once),
// stops answering and waits for the pipeline to finish.
func (m *Member) Close(ctx context.Context) error {
	if m.cancel == nil {
		return nil
	}
	m.cancel()
	close(m.closing)
	m.undos.Wait()
	<-m.done // the lease loop released every partition, so every feed stopped
	if m.query != nil {
		m.query.Unsubscribe()
	}
	if m.alerts != nil {
		m.alerts.Unsubscribe()
	}
	m.feeds.Source().Stop()
	err := m.consumer.Wait(ctx)
	if m.filer != nil {
		m.filer.originals.Wait() // the dead letters of filed events under way
	}
	return err
}

// Sweep brings the aggregators of every partition this member holds up to
// now and forgets the throttle keys at rest, freeing what expired when no
// traffic or reads come by.
func (m *Member) Sweep(now int64) {
	for _, pt := range m.parts.openRuns() {
		for _, s := range pt.stages {
			if s.Agg != nil {
				s.Agg.Advance(now)
			}
			if s.Thr != nil {
				s.Thr.Sweep(now)
			}
		}
	}
}

// Ready reports whether this member holds, caught up, every partition
// that is its share of the group, and the filing if it is its share: the
// filing is caught up once it has filed what the copy held when it began.
func (m *Member) Ready() bool {
	t := m.leases.Table()
	if !t.Synced {
		return false
	}
	m.mu.Lock()
	filing := m.filing
	m.mu.Unlock()
	for _, p := range t.Wants {
		if p == m.cfg.Partitions { // the filer's: caught up with the copy
			if filing == nil || !filing.caughtUp.Load() {
				return false
			}
			continue
		}
		if pt := m.parts.run(p); pt == nil || !pt.caughtUp() {
			return false
		}
	}
	return true
}

// hand is what the lease loop has the member do with a lease it wins or
// loses (lease.Hand): a partition's are its partitions'; the one past the
// last partition is the filer's.
type hand struct{ m *Member }

func (h hand) Start(p int, claim uint64) {
	if p == h.m.cfg.Partitions {
		h.m.startFiling(claim) // ready once it has filed what the copy holds
		return
	}
	h.m.parts.Start(p, claim)
}

func (h hand) Stop(p int, claim uint64, lost bool) {
	if p == h.m.cfg.Partitions {
		h.m.stopFiling(claim)
		return
	}
	h.m.parts.Stop(p, claim, lost)
}

// Holds reports whether this member holds part (a partition stage, as
// stage names it for acts: "room.17") and may act for it now: whose acts'
// undos it does (docs/contract.md section 14).
func (m *Member) Holds(part string) bool {
	_, n, ok := strings.Cut(part, ".")
	p, err := strconv.Atoi(n)
	if !ok || err != nil {
		return false
	}
	pt := m.parts.run(p)
	return pt != nil && pt.fence.acting()
}

// PartOf is the part (a partition stage, as Holds takes it) that decides
// for room, or, if room is empty, for user: whose member acts for a
// moderator's timeout (docs/contract.md section 14).
func (m *Member) PartOf(room, user string) string {
	if room != "" {
		return stageRoom + "." + strconv.Itoa(Partition(chat.Token(room), m.cfg.Partitions))
	}
	return stageUser + "." + strconv.Itoa(Partition(chat.Token(user), m.cfg.Partitions))
}
