package guardgrpc

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"google.golang.org/grpc"
)

// ErrNotServed is wrapped by the error CheckMethods returns for each
// listed method the server does not serve as a unary method.
var ErrNotServed = errors.New("guardgrpc: not served")

// ServiceInfoProvider is what CheckMethods reads of a server: the
// services registered on it. *grpc.Server is one.
type ServiceInfoProvider interface {
	GetServiceInfo() map[string]grpc.ServiceInfo
}

// CheckMethods returns an error naming each of fullMethods, the names
// given to WithMethods, that srv does not serve as a unary method, or nil
// when it serves them all. A name that is well formed but wrong
// ("/catalog.Catalog/GetProduct" for a service in package catalog.v1)
// matches no call, so the interceptor would cache nothing, silently. Call
// it once the services are registered, before Serve; the error wraps
// ErrNotServed for each such method (errors.Join), and says which served
// method it probably meant.
func CheckMethods(srv ServiceInfoProvider, fullMethods ...string) error {
	services := srv.GetServiceInfo()
	var errs []error
	for _, m := range fullMethods {
		if why := notServed(services, m); why != "" {
			errs = append(errs, fmt.Errorf("%w: %s (%s)", ErrNotServed, m, why))
		}
	}
	return errors.Join(errs...)
}

// notServed says why services do not serve the unary method m, or "".
func notServed(services map[string]grpc.ServiceInfo, m string) string {
	svc, name, _ := strings.Cut(strings.TrimPrefix(m, "/"), "/")
	info, ok := services[svc]
	if ok {
		for _, mi := range info.Methods {
			switch {
			case mi.Name != name:
			case mi.IsClientStream || mi.IsServerStream:
				return "a streaming method: the unary interceptors never see it"
			default:
				return ""
			}
		}
	}
	// The name probably meant: the same service and method in another
	// package, a unary method.
	for _, s := range slices.Sorted(maps.Keys(services)) {
		for _, mi := range services[s].Methods {
			if full := "/" + s + "/" + mi.Name; !mi.IsClientStream && !mi.IsServerStream && shortName(full) == shortName(m) {
				return "did you mean " + full + "?"
			}
		}
	}
	if ok {
		names := make([]string, 0, len(info.Methods))
		for _, mi := range info.Methods {
			names = append(names, mi.Name)
		}
		slices.Sort(names) // grpc lists them in map order
		return fmt.Sprintf("%s has no method %s; it has %s", svc, name, strings.Join(names, ", "))
	}
	return "no service " + svc + " is registered"
}

// shortName is a full method name without the service's package:
// "Catalog/GetProduct" for "/catalog.v1.Catalog/GetProduct". It is a
// substring of m, so it costs no allocation.
func shortName(m string) string {
	slash := strings.LastIndexByte(m, '/')
	if slash < 0 {
		return m
	}
	start := strings.LastIndexByte(m[:slash], '.') + 1
	if start == 0 && strings.HasPrefix(m, "/") {
		start = 1 // a service without a package
	}
	return m[start:]
}
