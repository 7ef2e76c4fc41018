// Package dendrite runs a real Matrix homeserver, Dendrite, its JetStream
// on a NATS server the caller runs, and speaks its client-server API as a
// chat client does: register, create rooms, join, send. chatpulse's tests
// and chatbench use it alike.
//
// It is for tests and measurements only: nothing of chatpulse imports it.
package dendrite

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.yaml.in/yaml/v3"

	"github.com/chatpulse/chatpulse/internal/wait"
)

// Install is how .ci/run and docs/input.md install Dendrite.
const Install = "go install github.com/matrix-org/dendrite/cmd/dendrite@v0.13.8 " +
	"github.com/matrix-org/dendrite/cmd/generate-config@v0.13.8 github.com/matrix-org/dendrite/cmd/generate-keys@v0.13.8"

// Stream is where Dendrite publishes every room's events: what chatpulse
// reads with --input matrix --source-stream.
const Stream = "DendriteOutputRoomEvent"

// Tools are Dendrite's commands.
type Tools struct{ Dendrite, GenerateConfig, GenerateKeys string }

// Find finds Dendrite's commands on PATH or in Go's install directory; the
// error says how to install them.
func Find() (Tools, error) {
	dirs := []string{""}
	if out, err := exec.Command("go", "env", "GOBIN", "GOPATH").Output(); err == nil {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) == 2 {
			dirs = append(dirs, lines[0], filepath.Join(lines[1], "bin"))
		}
	}
	find := func(name string) string {
		for _, dir := range dirs {
			p := name
			if dir != "" {
				p = filepath.Join(dir, name)
			}
			if p, err := exec.LookPath(p); err == nil {
				return p
			}
		}
		return ""
	}
	t := Tools{find("dendrite"), find("generate-config"), find("generate-keys")}
	if t.Dendrite == "" || t.GenerateConfig == "" || t.GenerateKeys == "" {
		return t, errors.New("Dendrite is not installed (" + Install + "): a real Matrix homeserver is needed here")
	}
	return t, nil
}

// TB is the part of testing.TB that Need uses: so chatbench, which
// imports this package, links no testing.
type TB interface {
	Helper()
	Fatal(args ...any)
	Skip(args ...any)
}

// Need is Find for a test. Without Dendrite the test skips, unless
// CI=true: then it fails, as chatpulse's other tests that need a tool do.
func Need(t TB) Tools {
	t.Helper()
	tools, err := Find()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err.Error() + "; CI=true, so this is a failure")
		}
		t.Skip(err.Error() + "; skipping")
	}
	return tools
}

// A Server is a Dendrite running, and a client of its client-server API.
type Server struct {
	URL    string
	secret string // of registration by shared secret
	txn    atomic.Int64
	cmd    *exec.Cmd
	exited chan error
}

// Start runs Dendrite in dir against natsURL, as docs/input.md sets it
// up: generate-keys, generate-config, and global.jetstream.addresses
// pointing at the NATS server (with TLS validation off: generate-config's
// true makes it demand TLS from a plain server). Federation, server
// notices, rate limits and most logs are off, and passwords are hashed
// cheaply, for a quick start. What it writes goes to out (nil: nowhere).
// It returns once Dendrite answers; Stop ends it.
func Start(tools Tools, dir, natsURL string, out io.Writer) (*Server, error) {
	return StartWith(tools, dir, natsURL, out, nil)
}

// StartWith is Start with configure applied to Dendrite's configuration,
// the YAML as a map, just before it is written: a test that wants
// Dendrite's rate limits on, say. A nil configure changes nothing.
func StartWith(tools Tools, dir, natsURL string, out io.Writer, configure func(cfg map[string]any)) (*Server, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	run := func(name string, args ...string) ([]byte, error) {
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		b, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		return b, nil
	}
	if _, err := run(tools.GenerateKeys, "--private-key", filepath.Join(dir, "matrix_key.pem")); err != nil {
		return nil, err
	}
	generated, err := run(tools.GenerateConfig, "-dir", dir)
	if err != nil {
		return nil, err
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(generated, &cfg); err != nil {
		return nil, err
	}
	s := &Server{secret: "chatpulse-test", exited: make(chan error, 1)}
	section := func(m map[string]any, key string) map[string]any { return m[key].(map[string]any) }
	global := section(cfg, "global")
	global["private_key"] = filepath.Join(dir, "matrix_key.pem")
	global["disable_federation"] = true
	section(global, "server_notices")["enabled"] = false
	js := section(global, "jetstream")
	js["addresses"] = []string{natsURL}
	js["disable_tls_validation"] = false
	client := section(cfg, "client_api")
	client["registration_shared_secret"] = s.secret
	section(client, "rate_limiting")["enabled"] = false
	section(cfg, "user_api")["bcrypt_cost"] = 4
	cfg["logging"] = []map[string]any{{"type": "std", "level": "error"}}
	if configure != nil {
		configure(cfg)
	}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	config := filepath.Join(dir, "dendrite.yaml")
	if err := os.WriteFile(config, data, 0o600); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	s.URL = "http://" + addr
	s.cmd = exec.Command(tools.Dendrite, "--config", config, "--http-bind-address", addr)
	s.cmd.Dir = dir
	s.cmd.Stdout, s.cmd.Stderr = out, out
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { s.exited <- s.cmd.Wait() }()
	exited, why := false, error(nil)
	err = wait.Until(60*time.Second, func() error {
		select {
		case why = <-s.exited:
			exited = true
			return nil // nothing more to wait for
		default:
		}
		resp, err := http.Get(s.URL + "/_matrix/client/versions")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("dendrite: /_matrix/client/versions: %s", resp.Status)
		}
		return nil
	})
	switch {
	case exited:
		return nil, fmt.Errorf("dendrite exited: %v", why)
	case err != nil:
		s.Stop()
		return nil, err
	}
	return s, nil
}

// Stop ends Dendrite: an interrupt, then, 10 s later, a kill.
func (s *Server) Stop() {
	s.cmd.Process.Signal(os.Interrupt)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		s.cmd.Process.Kill()
		<-s.exited
	}
}

// Call makes one client-server API request and decodes its answer into
// out.
func (s *Server) Call(method, path, token string, body, out any) error {
	var in io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		in = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, s.URL+path, in)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s %s: %w in %s", method, path, err, b)
		}
	}
	return nil
}

// A User is a registered user and its access token.
type User struct{ ID, Token string }

// Register makes an account by the shared secret (Synapse's admin API,
// which Dendrite serves) and returns it logged in.
func (s *Server) Register(name string) (User, error) {
	var nonce struct{ Nonce string }
	if err := s.Call("GET", "/_synapse/admin/v1/register", "", nil, &nonce); err != nil {
		return User{}, err
	}
	password := "password-" + name // Dendrite wants 8 characters at least
	mac := hmac.New(sha1.New, []byte(s.secret))
	mac.Write([]byte(nonce.Nonce + "\x00" + name + "\x00" + password + "\x00notadmin"))
	var out struct {
		UserID      string `json:"user_id"`
		AccessToken string `json:"access_token"`
	}
	err := s.Call("POST", "/_synapse/admin/v1/register", "", map[string]any{
		"nonce": nonce.Nonce, "username": name, "password": password, "admin": false, "mac": hex.EncodeToString(mac.Sum(nil)),
	}, &out)
	return User{out.UserID, out.AccessToken}, err
}

// RoomPath is the client-server API's path of room.
func RoomPath(room string) string { return "/_matrix/client/v3/rooms/" + url.PathEscape(room) }

// CreateRoom makes a public room named name and returns its id.
func (s *Server) CreateRoom(u User, name string) (string, error) {
	var out struct {
		RoomID string `json:"room_id"`
	}
	err := s.Call("POST", "/_matrix/client/v3/createRoom", u.Token, map[string]any{"preset": "public_chat", "name": name}, &out)
	return out.RoomID, err
}

// Join joins u to room.
func (s *Server) Join(u User, room string) error {
	return s.Call("POST", "/_matrix/client/v3/join/"+url.PathEscape(room), u.Token, map[string]any{}, nil)
}

// Leave has u leave room.
func (s *Server) Leave(u User, room string) error {
	return s.Call("POST", RoomPath(room)+"/leave", u.Token, map[string]any{}, nil)
}

// Send sends an event of type evType to room and returns its id once the
// homeserver has it.
func (s *Server) Send(u User, room, evType string, content map[string]any) (string, error) {
	var out struct {
		EventID string `json:"event_id"`
	}
	err := s.Call("PUT", fmt.Sprintf("%s/send/%s/t%d", RoomPath(room), evType, s.txn.Add(1)), u.Token, content, &out)
	return out.EventID, err
}

// Redact redacts event, sent to room.
func (s *Server) Redact(u User, room, event string) error {
	return s.Call("PUT", fmt.Sprintf("%s/redact/%s/t%d", RoomPath(room), url.PathEscape(event), s.txn.Add(1)), u.Token, map[string]any{"reason": "test"}, nil)
}

// TS is the origin_server_ts the homeserver gave an event.
func (s *Server) TS(u User, room, event string) (int64, error) {
	var out struct {
		TS int64 `json:"origin_server_ts"`
	}
	err := s.Call("GET", RoomPath(room)+"/event/"+url.PathEscape(event), u.Token, nil, &out)
	return out.TS, err
}

// Streamed waits until Dendrite has made Stream, and returns how many
// consumers it has: Dendrite's own. A stream that sources it must be made
// after (docs/input.md).
func Streamed(js jetstream.JetStream) (consumers int, err error) {
	err = wait.Until(30*time.Second, func() error {
		info, err := streamInfo(js)
		if err != nil {
			return fmt.Errorf("Dendrite's stream: %w", err)
		}
		consumers = info.State.Consumers
		return nil
	})
	return consumers, err
}

// Sourced waits until Stream has more consumers than Dendrite's own: a
// stream sources it. Dendrite's stream keeps nothing nobody has interest
// in, so no room event may come before.
func Sourced(js jetstream.JetStream, own int) error {
	return wait.Until(30*time.Second, func() error {
		info, err := streamInfo(js)
		if err != nil {
			return err
		}
		if n := info.State.Consumers; n <= own {
			return fmt.Errorf("Dendrite's stream has %d consumers, as before chatpulse: not sourced yet", n)
		}
		return nil
	})
}

func streamInfo(js jetstream.JetStream) (*jetstream.StreamInfo, error) {
	s, err := js.Stream(context.Background(), Stream)
	if err != nil {
		return nil, err
	}
	return s.CachedInfo(), nil
}
