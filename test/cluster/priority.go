package cluster

import (
	"context"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// CreatePod creates a pod. A pod that names a PriorityClass created just
// before may be refused for a moment: the API server's Priority admission
// plugin looks the class up in its own informer's cache and answers
// Forbidden "no PriorityClass with name X was found" until that cache has
// it (kubernetes plugin/pkg/admission/priority/admission.go, admitPod). A
// create refused so is tried again for up to 30 s; any other error is
// returned at once.
func CreatePod(ctx context.Context, c kubernetes.Interface, p *corev1.Pod, opts metav1.CreateOptions) (*corev1.Pod, error) {
	var created *corev1.Pod
	var err error
	_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		created, err = c.CoreV1().Pods(p.Namespace).Create(ctx, p, opts)
		return !priorityClassNotYetSeen(err), nil
	})
	return created, err
}

// priorityClassNotYetSeen says whether err is the Priority admission
// plugin's refusal of a class its cache does not hold yet.
func priorityClassNotYetSeen(err error) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "no PriorityClass with name")
}
