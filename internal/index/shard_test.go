package index

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dra-exporter/dra-exporter/internal/shard"
)

func podWarning(ns, name string) *corev1.Event {
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: ns, Name: name},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: "p"},
		Type:           corev1.EventTypeWarning,
		Reason:         "FailedPrepareDynamicResources",
		Message:        "Failed to prepare dynamic resources",
	}
}

// A shard keeps only its namespaces' events (evidence about its own pods),
// and says which namespaces are its own.
func TestShardKeepsItsEvents(t *testing.T) {
	sh, err := shard.WithAssignment(1, 2, func(ns string) int {
		if ns == "mine" {
			return 1
		}
		return 0
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []struct {
		shard shard.Shard
		want  int
	}{{shard.Shard{}, 2}, {sh, 1}} {
		ix := New(Config{Shard: cfg.shard})
		for _, e := range []*corev1.Event{podWarning("mine", "e1"), podWarning("theirs", "e2")} {
			if err := ix.Upsert(e, true); err != nil {
				t.Fatal(err)
			}
		}
		s := ix.Snapshot()
		if len(s.Events) != cfg.want {
			t.Errorf("shard %v keeps %d events, want %d", cfg.shard, len(s.Events), cfg.want)
		}
		if !s.Owns("mine") || s.Owns("theirs") != !cfg.shard.Sharded() {
			t.Errorf("shard %v: Owns(mine)=%v Owns(theirs)=%v", cfg.shard, s.Owns("mine"), s.Owns("theirs"))
		}
	}
}
