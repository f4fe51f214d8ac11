package dra

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func ptr[T any](v T) *T { return &v }

func claim(name string, owner *metav1.OwnerReference, podClaim string, reservedFor ...resourceapi.ResourceClaimConsumerReference) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
	if owner != nil {
		c.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	if podClaim != "" {
		c.Annotations = map[string]string{resourceapi.PodResourceClaimAnnotation: podClaim}
	}
	c.Status.ReservedFor = reservedFor
	return c
}

func podOwner(uid types.UID) *metav1.OwnerReference {
	return &metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: "p", UID: uid, Controller: ptr(true)}
}

// PodClaims resolves every way a pod names a claim, as the exporter's
// index and the node agent both read it.
func TestPodClaims(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u1"},
		Spec: corev1.PodSpec{SchedulingGroup: &corev1.PodSchedulingGroup{PodGroupName: ptr("g")}, ResourceClaims: []corev1.PodResourceClaim{
			{Name: "named", ResourceClaimName: ptr("shared")},
			{Name: "recorded", ResourceClaimTemplateName: ptr("t")},
			{Name: "owned", ResourceClaimTemplateName: ptr("t")},
			{Name: "group", ResourceClaimTemplateName: ptr("t")},
			{Name: "skipped", ResourceClaimTemplateName: ptr("t")},
			{Name: "stale", ResourceClaimTemplateName: ptr("t")},
		}},
		Status: corev1.PodStatus{ResourceClaimStatuses: []corev1.PodResourceClaimStatus{
			{Name: "recorded", ResourceClaimName: ptr("p-recorded-x")},
			{Name: "skipped"},
			{Name: "stale", ResourceClaimName: ptr("p-stale-x")},
		}}}
	claims := map[string]*resourceapi.ResourceClaim{}
	for _, c := range []*resourceapi.ResourceClaim{
		claim("shared", nil, ""),
		claim("p-recorded-x", podOwner("u1"), "recorded"),
		claim("p-owned-y", podOwner("u1"), "owned"),
		claim("g-group-z", &metav1.OwnerReference{APIVersion: "scheduling.k8s.io/v1alpha2", Kind: "PodGroup", Name: "g", UID: "gu", Controller: ptr(true)}, "group"),
		claim("p-stale-x", podOwner("old-incarnation"), "stale"),
		func() *resourceapi.ResourceClaim {
			c := claim("p-extended", podOwner("u1"), "")
			c.Annotations = map[string]string{resourceapi.ExtendedResourceClaimAnnotation: "true"}
			return c
		}(),
	} {
		claims[ClaimKey(c.Namespace, c.Name)] = c
	}
	var got []string
	for _, pc := range PodClaims[*resourceapi.ResourceClaim](NewClaimSet(claims), pod) {
		got = append(got, fmt.Sprintf("%s=%s(%v)", pc.Name, pc.ClaimName, pc.Claim != nil))
	}
	want := "[named=shared(true) recorded=p-recorded-x(true) owned=p-owned-y(true) group=g-group-z(true) stale=p-stale-x(false) =p-extended(true)]"
	if fmt.Sprint(got) != want {
		t.Errorf("got  %v\nwant %s", got, want)
	}
}

func TestReservedForPod(t *testing.T) {
	member := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "u1"}, Spec: corev1.PodSpec{SchedulingGroup: &corev1.PodSchedulingGroup{PodGroupName: ptr("g")}}}
	loner := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "u2"}}
	byPod := claim("a", nil, "", resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: "p", UID: "u2"})
	byGroup := claim("b", nil, "", resourceapi.ResourceClaimConsumerReference{APIGroup: "scheduling.k8s.io", Resource: "podgroups", Name: "g", UID: "gu"})
	for _, c := range []struct {
		c    *resourceapi.ResourceClaim
		p    *corev1.Pod
		want bool
	}{{byPod, loner, true}, {byPod, member, false}, {byGroup, member, true}, {byGroup, loner, false}} {
		if got := ReservedForPod(c.c, c.p); got != c.want {
			t.Errorf("claim %s for pod %s: %v, want %v", c.c.Name, c.p.UID, got, c.want)
		}
	}
}

func TestUsedByContainers(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	uses := corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}
	for _, c := range []struct {
		name string
		spec corev1.PodSpec
		want bool
	}{
		{"a container", corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: uses}}}, true},
		{"an init container only", corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}, InitContainers: []corev1.Container{{Name: "i", Resources: uses}}}, false},
		{"a sidecar", corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}, InitContainers: []corev1.Container{{Name: "s", RestartPolicy: &always, Resources: uses}}}, true},
		{"no container", corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}, false},
	} {
		pod := &corev1.Pod{Spec: c.spec}
		if got := UsedByContainers(pod, PodClaim[*resourceapi.ResourceClaim]{Name: "gpu"}); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func TestResources(t *testing.T) {
	r := ParseResources(" nvidia.com/gpu, nvidia.com/mig-1g.10gb ,,")
	if !r.Has("nvidia.com/gpu") || !r.Has("nvidia.com/mig-1g.10gb") || r.Has("nvidia.com/vgpu") || len(r) != 2 {
		t.Errorf("%q", r)
	}
}
