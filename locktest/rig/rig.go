package rig

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ory/dockertest/v3"
	dc "github.com/ory/dockertest/v3/docker"
	"golang.org/x/sync/errgroup"
)

// Image is the Docker image every node runs. scripts/redis-image.sh builds it
// from Debian's redis-server without a registry.
const Image = "redquorum/redis:7-local"

// AddrsEnv is the environment variable through which [Cluster.Env] hands the
// node addresses to another process; [AddrsFromEnv] reads it.
const AddrsEnv = "REDQUORUM_RIG_ADDRS"

const (
	labelRun     = "org.redquorum.rig"         // the Start call that owns a container or network
	labelExpires = "org.redquorum.rig.expires" // Unix time after which anyone may remove it
	redisPort    = dc.Port("6379/tcp")
	readyTimeout = 30 * time.Second
)

// defaultArgs are the redis-server arguments of the image's CMD, which the
// rig replaces when it starts a container.
var defaultArgs = []string{"--save", "", "--appendonly", "no", "--protected-mode", "no", "--bind", "0.0.0.0", "--port", "6379"}

// An Option configures [Start].
type Option func(*config)

type config struct {
	args     []string
	replicas bool
	image    string
}

// WithArgs appends redis-server arguments for every node, after the defaults
// (no RDB or AOF persistence, protected mode off, bind 0.0.0.0, port 6379);
// a directive given again wins. A directive is "--name" followed by its values
// as separate arguments, for example
//
//	rig.WithArgs("--user", "default", "off", "--user", "app", "on", ">secret", "~lock:*", "+@all")
//
// Do not change --port or --bind: the rig reaches the server on 6379.
func WithArgs(args ...string) Option {
	return func(c *config) { c.args = append(c.args, args...) }
}

// WithImage runs the nodes from image, such as "redis:7", instead of
// [Image]; Docker pulls it when it is missing. The image must run
// redis-server with the arguments given as its command, as the official
// Redis images do.
func WithImage(image string) Option {
	return func(c *config) { c.image = image }
}

// Cluster is a set of independent Redis masters started by [Start], each
// with a replica under [WithReplicas]. Its methods and those of its nodes are
// safe for concurrent use.
type Cluster struct {
	// Nodes are the servers, in the order Start created them.
	Nodes []*Node

	pool       *dockertest.Pool
	image      string // repository:tag of every container
	id         string
	labels     map[string]string
	expires    time.Time
	network    *dockertest.Network
	guardCtx   context.Context
	stopGuards context.CancelFunc
	guards     sync.WaitGroup
}

// Node is one Redis master in a container, reached through its own [Proxy],
// and under [WithReplicas] a replica of it in a second container.
type Node struct {
	c     *Cluster
	name  string
	proxy *Proxy

	mu      sync.Mutex // serialises Docker operations on the node; guards master and replica
	master  *container // the server behind the proxy
	replica *container // replicates from master; nil without WithReplicas
}

// container is one Redis server's container, which survives Kill and Start.
type container struct {
	c    *Cluster
	name string
	id   string
	addr string // published address on 127.0.0.1 of the running server
}

// Start starts n Redis masters on a Docker network of their own, each behind
// a proxy on 127.0.0.1, and returns once every node answers PING. It removes
// all of it in t.Cleanup. It skips the test when Docker is unavailable, or
// fails it when the environment variable CI is "true"; it builds [Image] when
// missing. Any other failure fails the test; what was created is removed.
// Call Start from the test's goroutine.
func Start(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	if n < 1 {
		t.Fatalf("rig: Start needs at least one node, got %d", n)
	}
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	pool := connect(t)
	if cfg.image == "" {
		cfg.image = Image
		ensureImage(t, pool)
	}
	reap(t, pool)

	c := &Cluster{pool: pool, image: cfg.image, id: randomID(), expires: expiry(t)}
	c.labels = map[string]string{labelRun: c.id, labelExpires: strconv.FormatInt(c.expires.Unix(), 10)}
	c.guardCtx, c.stopGuards = context.WithCancel(context.Background())
	t.Cleanup(func() { c.cleanup(t) })

	network, err := pool.CreateNetwork("redquorum-rig-"+c.id, func(o *dc.CreateNetworkOptions) { o.Labels = c.labels })
	if err != nil {
		t.Fatalf("rig: create network: %v", err)
	}
	c.network = network

	ctx, cancel := context.WithTimeout(t.Context(), readyTimeout)
	defer cancel()
	args := slices.Clone(defaultArgs)
	if cfg.replicas {
		args = append(args, replicaArgs...)
	}
	args = append(args, cfg.args...)
	c.Nodes = make([]*Node, n)
	g, gctx := errgroup.WithContext(ctx) // the first failure ends the others' waits
	for i := range c.Nodes {
		node := &Node{c: c, name: fmt.Sprintf("redquorum-rig-%s-%d", c.id, i+1)}
		c.Nodes[i] = node
		g.Go(func() error { return node.create(gctx, args, cfg.replicas) })
	}
	if err := g.Wait(); err != nil {
		t.Fatalf("rig: %v", err)
	}
	return c
}

// Addrs returns the address of every node, in order.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Env returns "REDQUORUM_RIG_ADDRS=addr1,addr2,..." for the environment of
// another process, which reads it with [AddrsFromEnv]. The addresses are
// served by this process and stop working when the test ends.
func (c *Cluster) Env() string {
	return AddrsEnv + "=" + strings.Join(c.Addrs(), ",")
}

// AddrsFromEnv returns the node addresses that [Cluster.Env] put in the
// environment, or nil when the variable is unset or empty.
func AddrsFromEnv() []string {
	v := os.Getenv(AddrsEnv)
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}

// Name returns the name of the node: the name of its first master's
// container. It does not change when a [Node.Failover] moves the node to
// its other container.
func (n *Node) Name() string { return n.name }

// Addr returns the address clients use for the node: its proxy's, which stays
// the same across Kill and Start.
func (n *Node) Addr() string { return n.proxy.Addr() }

// Proxy returns the node's proxy, for finer control such as latency in one
// direction only.
func (n *Node) Proxy() *Proxy { return n.proxy }

// Kill sends SIGKILL to the node's server (its current master) and waits
// until its container has exited. Clients see their open connections closed,
// as after a crash (in a partition, only once it heals), and new connections
// closed at once until [Node.Start]. Killing a stopped node does nothing. On
// failure the node may be running or not.
func (n *Node) Kill(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.kill(ctx)
}

// Start starts a killed node's container again and waits until it answers
// PING. The server starts empty (no persistence) and may be published on a
// new port, which the proxy follows; [Node.Addr] does not change. A replica
// then resyncs from the empty master. Starting a running node does nothing.
// On failure the node may be running or not.
func (n *Node) Start(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.start(ctx)
}

// Restart kills the node and starts it again, empty: a crash and recovery
// without persistence.
func (n *Node) Restart(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.kill(ctx); err != nil {
		return err
	}
	return n.start(ctx)
}

// Pause freezes the processes of the node's master (docker pause), as a long
// GC pause or a stopped VM would: connections stay open and commands time
// out.
func (n *Node) Pause() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.c.pool.Client.PauseContainer(n.master.id); err != nil {
		return fmt.Errorf("rig: pause %s: %w", n.master.name, err)
	}
	return nil
}

// Unpause lets a paused node run again; it then answers what it was sent.
func (n *Node) Unpause() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.c.pool.Client.UnpauseContainer(n.master.id); err != nil {
		return fmt.Errorf("rig: unpause %s: %w", n.master.name, err)
	}
	return nil
}

// Partition cuts the node off from clients: see [Proxy.Partition].
func (n *Node) Partition() { n.proxy.Partition() }

// Heal ends a partition: see [Proxy.Heal].
func (n *Node) Heal() { n.proxy.Heal() }

// SetLatency delays traffic to and from the node by d in each direction, so
// that a round trip takes at least 2d longer; zero removes the delay.
func (n *Node) SetLatency(d time.Duration) { n.proxy.SetLatency(d, d) }

// create starts the node's proxy and container, and with replica its
// replica's, and waits until they are ready.
func (n *Node) create(ctx context.Context, args []string, replica bool) error {
	proxy, err := NewProxy("")
	if err != nil {
		return err
	}
	n.proxy = proxy
	if n.master, err = n.c.run(ctx, n.name, args); err != nil {
		return err
	}
	n.proxy.SetTarget(n.master.addr)
	if !replica {
		return nil
	}
	if n.replica, err = n.c.run(ctx, n.name+"-replica", args); err != nil {
		return err
	}
	return n.follow(ctx)
}

func (n *Node) kill(ctx context.Context) error {
	err := n.master.kill(ctx)
	n.proxy.SetTarget("")
	return err
}

func (n *Node) start(ctx context.Context) error {
	if err := n.master.start(ctx); err != nil {
		return err
	}
	n.proxy.SetTarget(n.master.addr)
	return nil
}

// run creates and starts a container named name that runs redis-server with
// args, and waits until it is ready.
func (c *Cluster) run(ctx context.Context, name string, args []string) (*container, error) {
	repo, tag, ok := strings.Cut(c.image, ":")
	if !ok {
		tag = "latest"
	}
	res, err := c.pool.RunWithOptions(&dockertest.RunOptions{
		Name:         name,
		Repository:   repo,
		Tag:          tag, // explicit, so dockertest finds a local image and does not pull it
		Cmd:          args,
		Labels:       c.labels,
		ExposedPorts: []string{string(redisPort)},
		PortBindings: map[dc.Port][]dc.PortBinding{redisPort: {{HostIP: "127.0.0.1"}}},
		NetworkID:    c.network.Network.ID,
	}, func(hc *dc.HostConfig) { hc.NetworkMode = c.network.Network.Name })
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", name, err)
	}
	ct := &container{c: c, name: name, id: res.Container.ID}
	return ct, ct.up(ctx)
}

// kill sends SIGKILL to the container and waits until it has exited.
func (ct *container) kill(ctx context.Context) error {
	client := ct.c.pool.Client
	err := client.KillContainer(dc.KillContainerOptions{ID: ct.id, Signal: dc.SIGKILL, Context: ctx})
	if notRunning := new(dc.ContainerNotRunning); err != nil && !errors.As(err, &notRunning) {
		return fmt.Errorf("rig: kill %s: %w", ct.name, err)
	}
	ct.addr = ""
	if _, err := client.WaitContainerWithContext(ct.id, ctx); err != nil {
		return fmt.Errorf("rig: kill %s: wait for exit: %w", ct.name, err)
	}
	return nil
}

// start starts the stopped container and waits until it is ready; a running
// one is left as it is.
func (ct *container) start(ctx context.Context) error {
	err := ct.c.pool.Client.StartContainerWithContext(ct.id, nil, ctx)
	if running := new(dc.ContainerAlreadyRunning); errors.As(err, &running) {
		return nil
	}
	if err == nil {
		err = ct.up(ctx)
	}
	if err != nil {
		return fmt.Errorf("rig: start %s: %w", ct.name, err)
	}
	return nil
}

// up waits until the running container is published and answers PING,
// records its address and arms its safety-net stop.
func (ct *container) up(ctx context.Context) error {
	for {
		c, err := ct.c.pool.Client.InspectContainerWithContext(ct.id, ctx)
		if err != nil {
			return err
		}
		if !c.State.Running {
			return fmt.Errorf("%s exited with code %d; last log lines:\n%s", ct.name, c.State.ExitCode, ct.logs())
		}
		if b := c.NetworkSettings.Ports[redisPort]; len(b) > 0 && b[0].HostPort != "" {
			addr := net.JoinHostPort("127.0.0.1", b[0].HostPort)
			if ping(ctx, addr) == nil {
				ct.addr = addr
				ct.c.guard(ct.id)
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s does not answer PING: %w", ct.name, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// ping sends PING on a new connection. Any reply but -LOADING means the
// server executes commands; with ACLs it may be -NOAUTH.
func ping(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	conn.SetDeadline(deadline)
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if (line[0] != '+' && line[0] != '-') || strings.HasPrefix(line, "-LOADING") {
		return fmt.Errorf("PING: %q", line)
	}
	return nil
}

// logs returns the last lines the container's server printed.
func (ct *container) logs() string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var buf bytes.Buffer
	err := ct.c.pool.Client.Logs(dc.LogsOptions{
		Context: ctx, Container: ct.id, OutputStream: &buf, ErrorStream: &buf,
		Stdout: true, Stderr: true, Tail: "20",
	})
	if err != nil {
		fmt.Fprintf(&buf, "(logs: %v)", err)
	}
	return buf.String()
}

// guard asks the daemon to stop the container once the cluster expires. The
// daemon carries the stop out even if this process dies, so a container whose
// test was killed does not run forever; the request returns early when the
// container stops or when cleanup cancels it.
func (c *Cluster) guard(id string) {
	secs := max(int64(time.Until(c.expires)/time.Second), 1)
	c.guards.Go(func() {
		_ = c.pool.Client.StopContainerWithContext(id, uint(secs), c.guardCtx)
	})
}

// cleanup removes the proxies, containers and network of the cluster.
func (c *Cluster) cleanup(t testing.TB) {
	for _, n := range c.Nodes {
		for _, ct := range []*container{n.master, n.replica} {
			if t.Failed() && ct != nil {
				t.Logf("rig: last log lines of %s:\n%s", ct.name, ct.logs())
			}
		}
		if n.proxy != nil {
			n.proxy.Close()
		}
	}
	c.stopGuards()
	cs, err := c.pool.Client.ListContainers(dc.ListContainersOptions{
		All: true, Filters: map[string][]string{"label": {labelRun + "=" + c.id}},
	})
	if err != nil {
		t.Errorf("rig: list containers to remove: %v", err)
	}
	for _, ct := range cs {
		if err := c.pool.Client.RemoveContainer(dc.RemoveContainerOptions{ID: ct.ID, Force: true, RemoveVolumes: true}); err != nil {
			t.Errorf("rig: remove container %s: %v", strings.Join(ct.Names, ","), err)
		}
	}
	c.guards.Wait()
	if c.network != nil {
		if err := c.pool.Client.RemoveNetwork(c.network.Network.ID); err != nil {
			t.Errorf("rig: remove network %s: %v", c.network.Network.Name, err)
		}
	}
}

// reap removes containers and networks that earlier Start calls left behind
// (their test binary was killed) once they have expired.
func reap(t testing.TB, pool *dockertest.Pool) {
	t.Helper()
	expired := func(labels map[string]string) bool {
		at, err := strconv.ParseInt(labels[labelExpires], 10, 64)
		return err == nil && time.Now().Unix() > at
	}
	cs, _ := pool.Client.ListContainers(dc.ListContainersOptions{All: true, Filters: map[string][]string{"label": {labelExpires}}})
	for _, ct := range cs {
		if expired(ct.Labels) && pool.Client.RemoveContainer(dc.RemoveContainerOptions{ID: ct.ID, Force: true, RemoveVolumes: true}) == nil {
			t.Logf("rig: removed expired container %s", strings.Join(ct.Names, ","))
		}
	}
	ns, _ := pool.Client.FilteredListNetworks(dc.NetworkFilterOpts{"label": {labelExpires: true}})
	for _, nw := range ns {
		if expired(nw.Labels) && pool.Client.RemoveNetwork(nw.ID) == nil {
			t.Logf("rig: removed expired network %s", nw.Name)
		}
	}
}

// connect returns a pool for a reachable Docker daemon, or skips or fails t.
func connect(t testing.TB) *dockertest.Pool {
	t.Helper()
	pool, err := dockertest.NewPool("")
	if err == nil {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		err = pool.Client.PingWithContext(ctx)
	}
	if err == nil {
		return pool
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("rig: Docker is not available (%v); CI=true, and in CI tests against real Redis must run, not skip", err)
	}
	t.Skipf("rig: Docker is not available (%v); skipping (with CI=true this fails)", err)
	return nil
}

var image struct {
	sync.Mutex
	ok bool
}

// ensureImage builds [Image] with scripts/redis-image.sh when Docker does not
// have it, once per process.
func ensureImage(t testing.TB, pool *dockertest.Pool) {
	t.Helper()
	image.Lock()
	defer image.Unlock()
	if image.ok {
		return
	}
	_, err := pool.Client.InspectImage(Image)
	if err == nil {
		image.ok = true
		return
	}
	if !errors.Is(err, dc.ErrNoSuchImage) {
		t.Fatalf("rig: inspect image %s: %v", Image, err)
	}
	script, err := findScript()
	if err != nil {
		t.Fatalf("rig: image %s is missing and %v", Image, err)
	}
	t.Logf("rig: image %s is missing; building it with %s", Image, script)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "bash", script).CombinedOutput(); err != nil {
		t.Fatalf("rig: building %s with %s failed: %v\n%s", Image, script, err, out)
	}
	image.ok = true
}

// findScript looks for scripts/redis-image.sh above this source file and
// above the working directory.
func findScript() (string, error) {
	var dirs []string
	if _, file, _, ok := runtime.Caller(0); ok {
		dirs = append(dirs, filepath.Dir(file))
	}
	if wd, err := os.Getwd(); err == nil {
		dirs = append(dirs, wd)
	}
	for _, dir := range dirs {
		for d := dir; ; d = filepath.Dir(d) {
			p := filepath.Join(d, "scripts", "redis-image.sh")
			if _, err := os.Stat(p); err == nil {
				return p, nil
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	return "", fmt.Errorf("scripts/redis-image.sh was not found above %s", strings.Join(dirs, " or "))
}

// expiry is when the cluster's containers stop by themselves: a minute after
// the test binary's deadline (go test -timeout), or in an hour without one.
func expiry(t testing.TB) time.Time {
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if at, ok := d.Deadline(); ok {
			return at.Add(time.Minute)
		}
	}
	return time.Now().Add(time.Hour)
}

func randomID() string {
	b := make([]byte, 4)
	rand.Read(b)
	return hex.EncodeToString(b)
}
