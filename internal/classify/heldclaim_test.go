package classify_test

import (
	"strings"
	"testing"

	. "github.com/dra-exporter/dra-exporter/internal/testsupport/testobj"

	"github.com/dra-exporter/dra-exporter/internal/classify"
	"github.com/dra-exporter/dra-exporter/internal/vocab"
)

// The NVIDIA driver refuses to prepare a device it still holds for another
// claim. explain says whether that claim is gone (dra-driver-nvidia-gpu#1278)
// or still there; the verdict stays node_prepare_failed.
func TestPrepareRefusedForAnotherClaim(t *testing.T) {
	const goneUID = "6d1f0a3e-8b2c-4e5d-9f7a-1c3b5d7e9f01"
	reservedClaim := ReservedFor(Allocated(genClaim(), "node-1", T0, Result("gpu", "node-1", "gpu-0")), statusPod())
	boundPod := Bound(statusPod(), "node-1")
	refused := func(uid string) any {
		return Event("prep", boundPod, vocab.FailedPrepareDynamicResources,
			"Failed to prepare dynamic resources: prepare dynamic resources: NodePrepareResources failed for ResourceClaim "+claimName+
				": error preparing devices for claim: prepare devices failed: requested device gpu-0 is already allocated to different claim "+uid, T0)
	}
	other := ReservedFor(Allocated(Claim("other", goneUID), "node-1", T0, Result("gpu", "node-1", "gpu-1")), Pod("other-pod", "uid-other-pod"))
	for _, tt := range []struct {
		name string
		objs []any
		want string // in the evidence of the failing link; "" for neither wording
	}{
		{"the other claim is gone", world(boundPod, reservedClaim, refused(goneUID)), "which no longer exists"},
		{"the other claim exists", world(boundPod, reservedClaim, refused(goneUID), other), "which exists"},
		{"another failure", world(boundPod, reservedClaim, Event("prep", boundPod, vocab.FailedPrepareDynamicResources, "NodePrepareResources: timeout", T0)), ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v := verdictOf(t, podName, tt.objs...)
			if v.Reason != classify.NodePrepareFailed {
				t.Fatalf("reason %s, want node_prepare_failed", v.Reason)
			}
			var evidence string
			for _, l := range v.Links {
				if l.State == classify.Fail {
					evidence = strings.Join(l.Evidence, "\n")
				}
			}
			gone, exists := strings.Contains(evidence, "no longer exists"), strings.Contains(evidence, "which exists")
			switch {
			case tt.want == "" && (gone || exists):
				t.Errorf("evidence names a held claim:\n%s", evidence)
			case tt.want != "" && !strings.Contains(evidence, tt.want):
				t.Errorf("evidence does not say %q:\n%s", tt.want, evidence)
			case tt.want == "which no longer exists" && !strings.Contains(evidence, "dra-driver-nvidia-gpu#1278"):
				t.Errorf("evidence does not name dra-driver-nvidia-gpu#1278:\n%s", evidence)
			}
		})
	}
}
