package node

import (
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/dra-exporter/dra-exporter/test/cluster"
)

// WorkloadPod is a pod of the workload image whose claim "gpu" comes from
// the template: its container prints the devices it was given and serves a
// readiness probe (failing when env sets NOT_READY).
func WorkloadPod(ns, name, template string, env ...corev1.EnvVar) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To(int64(5)),
			ResourceClaims:                []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To(template)}},
			Containers: []corev1.Container{{
				Name:            "workload",
				Image:           WorkloadImage,
				ImagePullPolicy: corev1.PullNever,
				Env:             env,
				Resources:       corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromInt32(8080)}},
					PeriodSeconds: 1,
				},
			}},
		},
	}
}

// ClaimTemplate asks for one device of the example driver's class, with
// CEL selectors, and with an opaque driver config when config is not nil.
func ClaimTemplate(ns, name string, config *resourceapi.OpaqueDeviceConfiguration, selectors ...string) *resourceapi.ResourceClaimTemplate {
	tmpl := cluster.ClaimTemplate(ns, name, DeviceClass, selectors...)
	if config != nil {
		tmpl.Spec.Spec.Devices.Config = []resourceapi.DeviceClaimConfiguration{{
			DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: config},
		}}
	}
	return tmpl
}

// BogusSharing is the example driver's GpuConfig with a sharing strategy
// the driver rejects when it prepares the device (its admission webhook,
// which would refuse it earlier, does not run here): the kubelet's
// NodePrepareResources fails with "unknown GPU sharing strategy: Bogus".
func BogusSharing() *resourceapi.OpaqueDeviceConfiguration {
	return &resourceapi.OpaqueDeviceConfiguration{
		Driver: Driver,
		Parameters: runtime.RawExtension{Raw: []byte(
			`{"apiVersion":"gpu.resource.example.com/v1alpha1","kind":"GpuConfig","sharing":{"strategy":"Bogus"}}`)},
	}
}

// NoSuchModel is a claim selector no device of the example driver matches:
// a negative control.
const NoSuchModel = `device.attributes["` + Driver + `"].model == "NVIDIA B300"`
