package main

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestFlagsAndEnvironment(t *testing.T) {
	env := map[string]string{"CHATPULSE_WINDOWS": "10s:1s,2m", "CHATPULSE_JETSTREAM": "false", "CHATPULSE_HTTP": "127.0.0.1:9999"}
	m := NewMain()
	if err := m.ParseFlags([]string{"--http", "127.0.0.1:7777", "--allowed-origins", "https://a.example, https://b.example"}, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	c := m.Config
	if len(c.Windows) != 2 || c.Windows[0].Name != "10s" || c.JetStream || c.HTTP != "127.0.0.1:7777" || len(c.AllowedOrigins) != 2 {
		t.Fatalf("config: %+v", c)
	}
	if c.NATSListen != "127.0.0.1:4222" || c.DataDir != "./chatpulse-data" || c.Stream != "CHAT" || c.Subject != "chat.>" || c.MaxSkew != 5*time.Second || c.PushInterval != time.Second {
		t.Fatalf("defaults: %+v", c)
	}
	for name, tc := range map[string]struct {
		args []string
		env  map[string]string
		want string
	}{
		"bad window":   {[]string{"--windows", "1x"}, nil, `--windows: window "1x": size: "1x" is not a duration (examples: 90s, 5m, 1h, 7d)`},
		"bad env":      {nil, map[string]string{"CHATPULSE_MAX_SKEW": "soon"}, `CHATPULSE_MAX_SKEW="soon": parse error`},
		"stray arg":    {[]string{"extra"}, nil, `unexpected argument "extra" (flags start with --; see --help)`},
		"unknown flag": {[]string{"--nope"}, nil, "flag provided but not defined: -nope"},
	} {
		m := NewMain()
		m.Stderr = &bytes.Buffer{}
		err := m.ParseFlags(tc.args, func(k string) string { return tc.env[k] })
		var usage *UsageError
		if !errors.As(err, &usage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want a usage error containing %q", name, err, tc.want)
		}
	}
}

// Bad flags and unusable addresses or data directories end the binary with
// one line naming the problem and exit status 2.
func TestExitStatus(t *testing.T) {
	bin := buildBinary(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	file := filepath.Join(t.TempDir(), "a-file")
	os.WriteFile(file, nil, 0o644)
	free := fmt.Sprint("127.0.0.1:", freePort(t))
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"bad flag":      {[]string{"--windows", "1m:7s"}, "--windows"},
		"http taken":    {[]string{"--http", taken.Addr().String(), "--nats-listen", free}, "--http " + taken.Addr().String()},
		"nats taken":    {[]string{"--http", "127.0.0.1:0", "--nats-listen", taken.Addr().String()}, "--nats-listen " + taken.Addr().String()},
		"data dir":      {[]string{"--http", "127.0.0.1:0", "--nats-listen", free, "--data-dir", filepath.Join(file, "sub")}, "--data-dir"},
		"policies":      {[]string{"--http", "127.0.0.1:0", "--nats-listen", free, "--policies", filepath.Join(t.TempDir(), "none.yaml")}, "--policies"},
		"push interval": {[]string{"--push-interval", "1ms"}, "--push-interval: at least 50ms"},
		"unknown flag":  {[]string{"--nope"}, "flag provided but not defined: -nope (see --help)"},
	} {
		cmd := exec.Command(bin, tc.args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 {
			t.Errorf("%s: %v, want exit status 2; stderr: %s", name, err, stderr.String())
			continue
		}
		out := strings.TrimSpace(stderr.String())
		if strings.Count(out, "\n") != 0 || !strings.HasPrefix(out, "chatpulse: ") || !strings.Contains(out, tc.want) {
			t.Errorf("%s: stderr %q, want one line naming %q", name, out, tc.want)
		}
	}
}
