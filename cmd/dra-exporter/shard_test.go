package main

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/alecthomas/kingpin/v2"
)

func TestShardFlags(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		podName string
		want    string
		err     string
	}{
		{args: nil, want: "unsharded"},
		{args: []string{"--shard=2", "--total-shards=3"}, want: "2/3"},
		{args: []string{"--shard", "0", "--total-shards", "3"}, want: "0/3"},
		{args: []string{"--shard=3", "--total-shards=3"}, err: "out of range"},
		{args: []string{"--shard=-1", "--total-shards=3"}, err: "out of range"},
		{args: []string{"--total-shards=0"}, err: "at least 1"},
		{args: []string{"--auto-sharding", "--total-shards=3"}, podName: "dra-exporter-1", want: "1/3"},
		{args: []string{"--auto-sharding", "--total-shards=3"}, podName: "dra-exporter-3", err: "out of range"},
		{args: []string{"--auto-sharding", "--total-shards=3"}, podName: "", err: "$POD_NAME"},
		{args: []string{"--auto-sharding", "--total-shards=3"}, podName: "dra-exporter-5c8d9-abcde", err: "no trailing -<ordinal>"},
		{args: []string{"--auto-sharding", "--shard=1", "--total-shards=3"}, podName: "dra-exporter-1", err: "do not set --shard"},
		{args: []string{"--auto-sharding"}, podName: "dra-exporter-0", want: "unsharded"},
	} {
		app := kingpin.New("serve", "")
		var f shardFlags
		f.register(app)
		if _, err := app.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		got, err := f.resolve(func(k string) string {
			if k != "POD_NAME" {
				t.Errorf("read $%s", k)
			}
			return tc.podName
		})
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v (POD_NAME=%q): %v, %v; want error %q", tc.args, tc.podName, got, err, tc.err)
			}
			continue
		}
		if err != nil || got.String() != tc.want {
			t.Errorf("%v (POD_NAME=%q): %v, %v; want %s", tc.args, tc.podName, got, err, tc.want)
		}
	}
}

// A bad shard is a usage error (exit 2) before the exporter reaches for
// the cluster.
func TestServeRejectsBadShard(t *testing.T) {
	t.Setenv("POD_NAME", "dra-exporter")
	for _, args := range [][]string{
		{"serve", "--shard=3", "--total-shards=3"},
		{"serve", "--auto-sharding", "--total-shards=3"},
	} {
		var stderr bytes.Buffer
		if rc := run(args, io.Discard, &stderr); rc != 2 {
			t.Errorf("%v exited %d, want 2: %s", args, rc, stderr.String())
		}
		if !strings.Contains(stderr.String(), "shard") {
			t.Errorf("%v: the error names no shard: %s", args, stderr.String())
		}
	}
}
