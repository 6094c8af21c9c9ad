package anvilctl

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/state"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/anvil-metal/anvil/provider/internal/console"
	"github.com/anvil-metal/anvil/provider/internal/pki"
	"github.com/anvil-metal/anvil/provider/internal/replica"
	"github.com/anvil-metal/anvil/provider/internal/resources"
)

// DefaultEtcdPrefix is a site's prefix in etcd unless told otherwise (the provider's
// --etcd-prefix default).
const DefaultEtcdPrefix = "/anvil/default"

// sharedFiles are the state directory's files a site's replicas hold alike through etcd:
// the provider CA's, and the console token's hash.
var sharedFiles = append(pki.Files(), console.TokenHashFile)

// migration copies a stopped provider's embedded state into a site's empty etcd prefix.
type migration struct {
	from, to      string
	ca, cert, key string
	prefix        string
	endpoints     []string
	// reachTimeout bounds connecting to etcd and its first answer.
	reachTimeout time.Duration
	writers      int
}

func (m *migration) run(ctx context.Context, w io.Writer) error {
	var err error

	if m.endpoints, err = parseEtcdURL(m.to); err != nil {
		return err
	}

	if m.prefix, err = cleanPrefix(m.prefix); err != nil {
		return err
	}

	keys, src, err := resources.ReadState(m.from)
	if err != nil {
		return err
	}

	cli, err := replica.Dial(replica.ClientConfig{Endpoints: m.endpoints, CA: m.ca, Cert: m.cert, Key: m.key, DialTimeout: m.reachTimeout}, zap.NewNop())
	if err != nil {
		return err
	}

	defer cli.Close()

	if err := m.checkEmpty(ctx, cli); err != nil {
		return err
	}

	// From here on the prefix holds (part of) a copy: a failure leaves it to remove.
	if err := m.copy(ctx, w, cli, keys, src); err != nil {
		return fmt.Errorf("%w; do not start replicas on %s: remove the copy (etcdctl del --prefix %s/) and migrate again", err, m.prefix, m.prefix)
	}

	return nil
}

// copy writes the resources and the shared files under the empty prefix, reads them back
// and reports.
func (m *migration) copy(ctx context.Context, w io.Writer, cli *clientv3.Client, keys *resources.Keys, src []resource.Resource) error {
	dst, err := resources.OpenEtcd(ctx, cli, keys, m.prefix)
	if err != nil {
		return err
	}

	defer dst.Close()

	if err := m.createAll(ctx, dst, src); err != nil {
		return err
	}

	shared, err := m.shareFiles(ctx, cli, keys)
	if err != nil {
		return err
	}

	counts, diffs, err := m.verify(ctx, cli, keys, dst, src)
	if err != nil {
		return err
	}

	m.report(w, shared, counts, diffs)

	if len(diffs) > 0 {
		return fmt.Errorf("the copy in etcd differs from %s in %d places", resources.DBFile(m.from), len(diffs))
	}

	return nil
}

// parseEtcdURL turns etcd://host:port,host:port into the members' https:// endpoints
// (the port is 2379 when not given).
func parseEtcdURL(s string) ([]string, error) {
	const scheme = "etcd://"

	switch {
	case s == "":
		return nil, errors.New("--to is required: etcd://host:2379[,host:2379…]")
	case strings.HasPrefix(s, "http://"):
		return nil, fmt.Errorf("--to %s: etcd is spoken to over TLS only; give etcd://host:2379 with --etcd-ca, --etcd-cert and --etcd-key", s)
	case !strings.HasPrefix(s, scheme):
		return nil, fmt.Errorf("--to %s: want etcd://host:2379[,host:2379…]", s)
	}

	rest := strings.TrimSuffix(strings.TrimPrefix(s, scheme), "/")
	if rest == "" {
		return nil, fmt.Errorf("--to %s names no etcd hosts: want etcd://host:2379[,host:2379…]", s)
	}

	var endpoints []string

	for member := range strings.SplitSeq(rest, ",") {
		if strings.Contains(member, "://") {
			if strings.HasPrefix(member, "http://") {
				return nil, fmt.Errorf("--to %s: etcd is spoken to over TLS only; name the members as host:2379", s)
			}

			return nil, fmt.Errorf("--to %s: name the members as host:2379, without a scheme", s)
		}

		if strings.Contains(member, "/") {
			return nil, fmt.Errorf("--to %s: a member is host:2379, without a path (the site's prefix is --etcd-prefix)", s)
		}

		host, port := member, "2379"
		if strings.LastIndex(member, ":") > strings.LastIndex(member, "]") {
			var err error
			if host, port, err = net.SplitHostPort(member); err != nil {
				return nil, fmt.Errorf("--to %s: member %q: %w", s, member, err)
			}
		}

		host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
		if host == "" {
			return nil, fmt.Errorf("--to %s: a member without a host", s)
		}

		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("--to %s: member %q: port %q is not a port number", s, member, port)
		}

		endpoints = append(endpoints, "https://"+net.JoinHostPort(host, port))
	}

	return endpoints, nil
}

// cleanPrefix checks a site's prefix as the provider takes it: absolute, not the root.
func cleanPrefix(p string) (string, error) {
	clean := strings.TrimRight(p, "/")
	if !strings.HasPrefix(clean, "/") {
		return "", fmt.Errorf("--etcd-prefix %q: want an absolute prefix such as %s", p, DefaultEtcdPrefix)
	}

	return clean, nil
}

// checkEmpty refuses a prefix a provider runs on, or that holds anything.
func (m *migration) checkEmpty(ctx context.Context, kv clientv3.KV) error {
	ctx, cancel := context.WithTimeout(ctx, max(m.reachTimeout, time.Second))
	defer cancel()

	leaders, err := kv.Get(ctx, m.prefix+"/leader/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return fmt.Errorf("error reaching etcd at %s: %w", strings.Join(m.endpoints, ","), err)
	}

	if leaders.Count > 0 {
		return fmt.Errorf("a provider is running on etcd under %s: stop every replica first; a migration never merges into a site's state", m.prefix)
	}

	keys, err := kv.Get(ctx, m.prefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return fmt.Errorf("error reading etcd under %s: %w", m.prefix, err)
	}

	if keys.Count > 0 {
		return fmt.Errorf("etcd already holds %d keys under %s: a migration never merges into a state; choose another --etcd-prefix, "+
			"or remove a failed migration's copy with etcdctl del --prefix %s/", keys.Count, m.prefix, m.prefix)
	}

	return nil
}

// createAll creates every resource in st as it was, its owner included, several at a
// time.
func (m *migration) createAll(ctx context.Context, st state.State, src []resource.Resource) error {
	eg, ctx := errgroup.WithContext(ctx)
	eg.SetLimit(max(m.writers, 1))

	for _, r := range src {
		eg.Go(func() error {
			if err := st.Create(ctx, r.DeepCopy(), state.WithCreateOwner(r.Metadata().Owner())); err != nil {
				return fmt.Errorf("error writing %s %s into etcd: %w", r.Metadata().Type(), r.Metadata().ID(), err)
			}

			return nil
		})
	}

	return eg.Wait()
}

// shareFiles publishes the state directory's shared files as a replica would, and
// returns the names of those there were.
func (m *migration) shareFiles(ctx context.Context, kv resources.EtcdClient, keys *resources.Keys) ([]string, error) {
	var present []string

	for _, name := range sharedFiles {
		if _, err := os.Stat(filepath.Join(m.from, name)); err == nil {
			present = append(present, name)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("error reading %s: %w", name, err)
		}
	}

	// The prefix was empty: nothing is pulled into the state directory, every file is
	// published.
	files := replica.SharedFiles{KV: kv, Prefix: m.prefix, Dir: m.from, Names: present, Keys: keys}
	if err := files.Share(ctx, func() error { return nil }); err != nil {
		return nil, err
	}

	return present, nil
}

// verify reads the state back from etcd and compares it with src: every type the
// provider serves or src holds, every resource; and the shared files, pulled as a
// replica pulls them. It returns the resources per type and the differences.
func (m *migration) verify(ctx context.Context, kv resources.EtcdClient, keys *resources.Keys, dst state.State, src []resource.Resource) (map[resource.Type]int, []string, error) {
	type ref struct {
		typ resource.Type
		id  resource.ID
	}

	want := map[ref]resource.Resource{}
	counts := map[resource.Type]int{}

	for _, r := range src {
		want[ref{r.Metadata().Type(), r.Metadata().ID()}] = r
		counts[r.Metadata().Type()]++
	}

	types := make([]resource.Type, 0, len(counts))
	for typ := range counts {
		types = append(types, typ)
	}

	for _, d := range resources.Definitions() {
		types = append(types, d.ResourceDefinition().Type)
	}

	slices.Sort(types)
	types = slices.Compact(types)

	var diffs []string

	for _, typ := range types {
		list, err := dst.List(ctx, resource.NewMetadata(resources.NamespaceName, typ, "", resource.VersionUndefined))
		if err != nil {
			return nil, nil, fmt.Errorf("error reading %s back from etcd: %w", typ, err)
		}

		for _, got := range list.Items {
			k := ref{typ, got.Metadata().ID()}

			r, ok := want[k]
			if !ok {
				diffs = append(diffs, fmt.Sprintf("%s %s: in etcd only", typ, k.id))

				continue
			}

			delete(want, k)

			if what := differences(r, got); len(what) > 0 {
				diffs = append(diffs, fmt.Sprintf("%s %s: %s differ", typ, k.id, strings.Join(what, ", ")))
			}
		}
	}

	for k := range want {
		diffs = append(diffs, fmt.Sprintf("%s %s: missing from etcd", k.typ, k.id))
	}

	fileDiffs, err := m.verifyFiles(ctx, kv, keys)
	if err != nil {
		return nil, nil, err
	}

	diffs = append(diffs, fileDiffs...)
	slices.Sort(diffs)

	return counts, diffs, nil
}

// differences names what of a resource's metadata and spec differ between src and dst,
// never the values: a spec may hold secrets.
func differences(src, dst resource.Resource) []string {
	a, b := src.Metadata(), dst.Metadata()

	var what []string

	if a.Namespace() != b.Namespace() {
		what = append(what, "namespace")
	}

	if a.Owner() != b.Owner() {
		what = append(what, "owner")
	}

	if !a.Labels().Equal(*b.Labels()) {
		what = append(what, "labels")
	}

	if !a.Annotations().Equal(*b.Annotations()) {
		what = append(what, "annotations")
	}

	if !slices.Equal(*a.Finalizers(), *b.Finalizers()) {
		what = append(what, "finalizers")
	}

	if a.Phase() != b.Phase() {
		what = append(what, "phase")
	}

	// Both specs were decoded from their stored protobuf, and are compared whole: their
	// encodings would differ for equal specs with maps (protoenc writes a map in Go's
	// random order), and YAML leaves fields out (BMCSecret's password).
	if !reflect.DeepEqual(src.Spec(), dst.Spec()) {
		what = append(what, "spec")
	}

	return what
}

// verifyFiles pulls the shared files from etcd, as a replica does, into a temporary
// directory inside the state directory (they hold secrets: nowhere less protected) and
// compares them with the state directory's.
func (m *migration) verifyFiles(ctx context.Context, kv resources.EtcdClient, keys *resources.Keys) ([]string, error) {
	tmp, err := os.MkdirTemp(m.from, ".migrate-verify-")
	if err != nil {
		return nil, fmt.Errorf("error verifying the shared files: %w", err)
	}

	defer os.RemoveAll(tmp)

	files := replica.SharedFiles{KV: kv, Prefix: m.prefix, Dir: tmp, Names: sharedFiles, Keys: keys}
	if err := files.Share(ctx, func() error { return nil }); err != nil {
		return nil, fmt.Errorf("error reading the shared files back from etcd: %w", err)
	}

	var diffs []string

	for _, name := range sharedFiles {
		want, errWant := os.ReadFile(filepath.Join(m.from, name))
		got, errGot := os.ReadFile(filepath.Join(tmp, name))

		switch {
		case errors.Is(errWant, fs.ErrNotExist) && errors.Is(errGot, fs.ErrNotExist):
		case errors.Is(errGot, fs.ErrNotExist):
			diffs = append(diffs, fmt.Sprintf("file %s: missing from etcd", name))
		case errors.Is(errWant, fs.ErrNotExist):
			diffs = append(diffs, fmt.Sprintf("file %s: in etcd only", name))
		case errWant != nil || errGot != nil:
			return nil, fmt.Errorf("error comparing %s: %w", name, errors.Join(errWant, errGot))
		case !bytes.Equal(want, got):
			diffs = append(diffs, fmt.Sprintf("file %s: differs", name))
		}
	}

	return diffs, nil
}

// report prints what was copied, the differences, and what the operator does next.
func (m *migration) report(w io.Writer, shared []string, counts map[resource.Type]int, diffs []string) {
	total := 0

	fmt.Fprintf(w, "copied %s into etcd under %s:\n", resources.DBFile(m.from), m.prefix)

	for _, typ := range slices.Sorted(maps.Keys(counts)) {
		fmt.Fprintf(w, "  %-32s %d\n", typ, counts[typ])

		total += counts[typ]
	}

	if len(shared) > 0 {
		fmt.Fprintf(w, "shared through etcd: %s\n", strings.Join(shared, ", "))
	}

	fmt.Fprintf(w, "migrated %d resources of %d types, %d differences\n", total, len(counts), len(diffs))

	const shown = 50

	for _, d := range diffs[:min(len(diffs), shown)] {
		fmt.Fprintf(w, "  %s\n", d)
	}

	if len(diffs) > shown {
		fmt.Fprintf(w, "  and %d more\n", len(diffs)-shown)
	}

	if len(diffs) > 0 {
		return
	}

	fmt.Fprintf(w, `next:
  1. copy %s to every replica's --state-dir, mode 0600 (etcd does not hold it: it encrypts what etcd holds)
  2. start every replica with --state etcd --etcd-endpoints %s --etcd-prefix %s
     --etcd-ca FILE --etcd-cert FILE --etcd-key FILE (each replica's own etcd client certificate)
  3. never start a provider on %s again: it no longer follows the site (keep it as the migration's backup)
`, filepath.Join(m.from, "provider.key"), strings.Join(m.endpoints, ","), m.prefix, resources.DBFile(m.from))
}
