package nodegate

import (
	"strings"
	"testing"

	"github.com/dra-exporter/dra-exporter/internal/classify"
	"github.com/dra-exporter/dra-exporter/internal/index"
	"github.com/dra-exporter/dra-exporter/internal/testsupport/testobj"
)

// agentText is a node agent's /metrics: its node-wide series, and the
// holder of GPU-a, the pod's GPU, plus extra lines.
func agentText(podresourcesUp string, extra ...string) string {
	return strings.Join(append([]string{
		"# TYPE dra_node_podresources_up gauge",
		"dra_node_podresources_up " + podresourcesUp,
		"# TYPE dra_node_podresources_dynamic_resources gauge",
		"dra_node_podresources_dynamic_resources 1",
		"# TYPE dra_node_host_processes_visible gauge",
		"dra_node_host_processes_visible 1",
		"# TYPE dra_gpu_source_up gauge",
		`dra_gpu_source_up{source="nvml"} 1`,
		"# TYPE dra_gpu_info gauge",
		`dra_gpu_info{gpu_uuid="GPU-a",node="node-a"} 1`,
	}, extra...), "\n") + "\n"
}

const holder = "# TYPE dra_gpu_holder_info gauge\n" +
	`dra_gpu_holder_info{claim="c",gpu_uuid="GPU-a",lane="dra",namespace="prod",pod_uid="uid-p"} 1`

// TestEvaluate walks the node gate's reasons in the rule's order for a
// running pod holding one GPU: each agent's /metrics give the first
// reason that holds, and a complete one passes.
func TestEvaluate(t *testing.T) {
	pod := testobj.Running(testobj.Bound(testobj.WithClaimStatus(testobj.WithNamedClaim(testobj.Pod("p", "uid-p"), "gpu", "c"), "gpu", "c"), "node-a"))
	claim := testobj.ReservedFor(testobj.Allocated(testobj.Claim("c", "uid-c"), "node-a", testobj.T0, testobj.Result("gpu", "node-a", "gpu-0")), pod)
	ix := testobj.Build(t, index.Config{}, testobj.GPUClass(), testobj.Node("node-a", 0),
		testobj.Slice("node-a-gpus", "node-a", 1, testobj.GPUDevice("gpu-0", "GPU-a")), claim, pod)
	s := ix.Snapshot()
	p := s.Pod(index.Key{Namespace: testobj.NS, Name: "p"})
	if p == nil {
		t.Fatal("the pod is not in the snapshot")
	}
	for _, tc := range []struct {
		name, text string
		blocked    *classify.Verdict
		reason     string // "" passes
	}{
		{name: "no agent", reason: NoAgent},
		{name: "prepare failed", blocked: &classify.Verdict{Reason: classify.NodePrepareFailed}, text: agentText("1", holder), reason: PrepareFailed},
		{name: "cdi spec missing", blocked: &classify.Verdict{Reason: classify.CDISpecMissing}, text: agentText("1", holder), reason: PrepareFailed},
		{name: "pod-resources down", text: agentText("0", holder), reason: PodResourcesDown},
		{name: "not prepared", text: agentText("1"), reason: NotPrepared},
		{name: "violation", text: agentText("1", holder, "# TYPE dra_gpu_isolation_violation gauge",
			`dra_gpu_isolation_violation{gpu_uuid="GPU-b",namespace="prod",pod_uid="uid-p"} 1`), reason: IsolationViolation},
		{name: "both lanes", text: agentText("1", holder, "# TYPE dra_node_claim_conflict gauge",
			`dra_node_claim_conflict{claim="c",device="gpu-0",gpu_uuid="GPU-a",namespace="prod",pod_uid="uid-p",reason="both_lanes"} 1`), reason: BothLanes},
		{name: "prepared", text: agentText("1", holder)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var a *Agent
			if tc.text != "" {
				node, parsed, err := ReadAgent([]byte(tc.text))
				if err != nil {
					t.Fatal(err)
				}
				if node != "node-a" {
					t.Errorf("node %q, want node-a (dra_gpu_info's)", node)
				}
				a = parsed
				a.Source = "agents/node-a.prom"
			}
			pass, reason, evidence := Evaluate(s, p, tc.blocked, a)
			if pass != (tc.reason == "") || reason != tc.reason {
				t.Errorf("pass %v reason %q, want reason %q; evidence %q", pass, reason, tc.reason, evidence)
			}
			if len(evidence) == 0 {
				t.Error("no evidence")
			}
		})
	}
}

func TestReadAgentRejectsBadText(t *testing.T) {
	if _, _, err := ReadAgent([]byte("dra_node_podresources_up{ 1\n")); err == nil {
		t.Error("ReadAgent accepted text that does not parse")
	}
}
