package cluster

import (
	"context"

	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

func canI(ctx context.Context, c kubernetes.Interface, user, verb, group, resource string) (bool, error) {
	review := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User:   user,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ExporterNamespace, "system:authenticated"},
		ResourceAttributes: &authzv1.ResourceAttributes{
			Verb: verb, Group: group, Resource: resource,
		},
	}}
	res, err := c.AuthorizationV1().SubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
	if err != nil {
		return false, err
	}
	return res.Status.Allowed, nil
}
