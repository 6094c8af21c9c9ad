package console

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/anvil-metal/anvil/provider/internal/power"
	"github.com/anvil-metal/anvil/provider/internal/resources"
	"github.com/anvil-metal/anvil/provider/internal/transitions"
)

// maxFormSize bounds an action's form: an allocation's machine config and some room.
const maxFormSize = transitions.MaxConfigSize + 64<<10

// action is one thing an operator does to a machine from its page.
type action struct {
	// title names it on the confirmation page and in messages.
	title string
	// confirm says what the action will do, for the confirmation page; nil needs none
	// (nothing is lost by it: labels, modes, the BMC's address).
	confirm func(id string, form url.Values) string
	// owned: Omni decides it in Omni mode, so the console does not offer it.
	owned bool
	// preview checks the action without applying it and says what it will do, for the
	// confirmation page (the install disk an allocation resolves to); its error refuses
	// the action before it is confirmed. nil: none.
	preview func(ctx context.Context, t *transitions.Service, id string, form url.Values) (string, error)
	run     func(ctx context.Context, t *transitions.Service, id string, form url.Values) (string, error)
}

var actions = map[string]action{
	"accept": {
		title: "Accept", owned: true,
		confirm: func(id string, form url.Values) string {
			msg := "Accept machine " + id + ": its agent will wipe every disk, then the machine is ready to allocate."
			if form.Get("skip_wipe") == "on" {
				msg = "Accept machine " + id + " without wiping its disks: whatever is on them stays."
			}

			if ek := strings.TrimSpace(form.Get("ek")); ek != "" {
				msg += " Only the TPM with EK " + ek + " will be welcome as this machine."
			}

			return msg
		},
		run: func(ctx context.Context, t *transitions.Service, id string, form url.Values) (string, error) {
			_, err := t.AcceptWith(ctx, id, transitions.AcceptRequest{SkipWipe: form.Get("skip_wipe") == "on", EK: strings.TrimSpace(form.Get("ek"))})

			return "accepted", err
		},
	},
	"reject": {
		title: "Reject", owned: true,
		confirm: func(id string, _ url.Values) string {
			return "Reject machine " + id + ": the provider keeps off it; its agent lets it boot from its disk (or powers it off)."
		},
		run: func(ctx context.Context, t *transitions.Service, id string, _ url.Values) (string, error) {
			_, err := t.Reject(ctx, id)

			return "rejected", err
		},
	},
	"allocate": {
		title: "Allocate", owned: true,
		confirm: func(id string, form url.Values) string {
			msg := fmt.Sprintf("Allocate machine %s to Talos %s", id, form.Get("talos_version"))
			if ext := splitList(form.Get("extensions")); len(ext) > 0 {
				msg += " with " + strings.Join(ext, ", ")
			}

			if c, err := formConfig(form); err == nil && len(c) > 0 {
				msg += fmt.Sprintf(" and a machine config of %d bytes", len(c))
			}

			return msg + ": it boots Talos, which installs to its disk."
		},
		preview: func(ctx context.Context, t *transitions.Service, id string, form url.Values) (string, error) {
			req, err := allocationRequest(form)
			if err != nil {
				return "", err
			}

			req.DryRun = true

			spec, err := t.Allocate(ctx, id, req)
			if err != nil {
				return "", err
			}

			if d := spec.Allocation.InstallDisk; d != nil {
				return fmt.Sprintf("Talos installs to %s, named %s in its config (selector %q).", d.Disk, d.Identity, d.Selector), nil
			}

			return "Talos installs to the disk its machine config names.", nil
		},
		run: func(ctx context.Context, t *transitions.Service, id string, form url.Values) (string, error) {
			req, err := allocationRequest(form)
			if err != nil {
				return "", err
			}

			_, err = t.Allocate(ctx, id, req)

			return "allocated", err
		},
	},
	"deallocate": {
		title: "Deallocate", owned: true,
		confirm: func(id string, _ url.Values) string {
			return "Deallocate machine " + id + ": Talos and everything on its disks is wiped before it is handed out again."
		},
		run: func(ctx context.Context, t *transitions.Service, id string, _ url.Values) (string, error) {
			_, err := t.Deallocate(ctx, id)

			return "deallocated", err
		},
	},
	"power": {
		title: "Set power", owned: true,
		confirm: func(id string, form url.Values) string {
			switch form.Get("power") {
			case string(resources.PowerOff):
				return "Power machine " + id + " off through its BMC and keep it off, whatever runs on it."
			case string(resources.PowerOn):
				return "Power machine " + id + " on and keep it on."
			default:
				return "Let the provider's policy decide machine " + id + "'s power again."
			}
		},
		run: func(ctx context.Context, t *transitions.Service, id string, form url.Values) (string, error) {
			p := resources.PowerState(form.Get("power"))
			if !slices.Contains([]resources.PowerState{resources.PowerOn, resources.PowerOff, resources.PowerDefault}, p) {
				return "", &transitions.Error{Code: transitions.CodeInvalid, Msg: fmt.Sprintf("power %q is not one of on, off, default", p)}
			}

			_, err := t.SetPower(ctx, id, p)

			return "power " + string(p), err
		},
	},
	"reboot": {
		title: "Reboot", owned: true,
		confirm: func(id string, _ url.Values) string {
			return "Reboot machine " + id + " through its BMC (or its agent): whatever runs on it stops."
		},
		run: func(ctx context.Context, t *transitions.Service, id string, _ url.Values) (string, error) {
			_, _, err := t.Reboot(ctx, id)

			return "reboot requested", err
		},
	},
	"cordon": {
		title: "Cordon", owned: true,
		run: func(ctx context.Context, t *transitions.Service, id string, form url.Values) (string, error) {
			cordoned := form.Get("cordoned") == "true"
			_, err := t.SetCordon(ctx, id, cordoned)

			return map[bool]string{true: "cordoned", false: "uncordoned"}[cordoned], err
		},
	},
	"wipe-mode": {
		title: "Set wipe mode",
		confirm: func(id string, form url.Values) string {
			mode := form.Get("wipe_mode")
			if mode == "" || mode == "default" {
				return "Wipe machine " + id + "'s disks as the provider's --wipe-mode says from its next wipe on."
			}

			return "Wipe machine " + id + "'s disks with " + mode + " from its next wipe on."
		},
		run: func(ctx context.Context, t *transitions.Service, id string, form url.Values) (string, error) {
			mode := form.Get("wipe_mode")
			if mode == "default" {
				mode = ""
			}

			_, err := t.SetWipeMode(ctx, id, mode)

			return "wipe mode set", err
		},
	},
	"wipe-scope": {
		title: "Set wipe scope",
		confirm: func(id string, form url.Values) string {
			switch scope, keep := form.Get("wipe_scope"), strings.TrimSpace(form.Get("wipe_keep")); scope {
			case resources.WipeScopeAll:
				return "Wipe every disk of machine " + id + " from its next wipe on."
			case resources.WipeScopeInstallDisk:
				return "Wipe only the disk machine " + id + " last installed to from its next wipe on; its other disks are kept."
			case resources.WipeScopeAllExcept:
				return "Keep the disks of machine " + id + " that match " + strconv.Quote(keep) + " from its next wipe on; the others are wiped."
			default:
				return "Wipe machine " + id + "'s disks as the provider's --wipe-scope says from its next wipe on."
			}
		},
		run: func(ctx context.Context, t *transitions.Service, id string, form url.Values) (string, error) {
			scope := form.Get("wipe_scope")
			if scope == "default" {
				scope = ""
			}

			_, err := t.SetWipeScope(ctx, id, scope, strings.TrimSpace(form.Get("wipe_keep")))

			return "wipe scope set", err
		},
	},
	"kexec": {
		title: "Set kexec mode",
		run: func(ctx context.Context, t *transitions.Service, id string, form url.Values) (string, error) {
			mode := form.Get("kexec")
			if mode == "default" {
				mode = ""
			}

			_, err := t.SetKexecMode(ctx, id, mode)

			return "kexec mode set", err
		},
	},
	"labels": {
		title: "Set labels",
		run: func(ctx context.Context, t *transitions.Service, id string, form url.Values) (string, error) {
			set, err := parseLabels(form.Get("set"))
			if err != nil {
				return "", &transitions.Error{Code: transitions.CodeInvalid, Msg: err.Error()}
			}

			_, err = t.SetLabels(ctx, id, set, splitList(form.Get("remove")))

			return "labels updated", err
		},
	},
	"bmc": {
		title: "Set BMC",
		run: func(ctx context.Context, t *transitions.Service, id string, form url.Values) (string, error) {
			var port uint64

			if p := strings.TrimSpace(form.Get("port")); p != "" {
				var err error
				if port, err = strconv.ParseUint(p, 10, 16); err != nil {
					return "", &transitions.Error{Code: transitions.CodeInvalid, Msg: fmt.Sprintf("BMC port %q is not a port number", p)}
				}
			}

			_, err := t.SetBMC(ctx, id, transitions.BMC{
				Backend: power.Backend(form.Get("backend")), Address: strings.TrimSpace(form.Get("address")), Port: uint32(port),
				Username: form.Get("username"), Password: form.Get("password"),
				Insecure: form.Get("insecure") == "on", SystemID: strings.TrimSpace(form.Get("system_id")),
			})

			return "BMC set", err
		},
	},
}

// action runs one of actions: the form checked (session, CSRF), a confirmation page first
// where the action asks for one, then the transition. A refusal shows the machine's page
// with why and the form as sent; nothing is half-applied: each action is one transition.
func (s *Server) action(w http.ResponseWriter, r *http.Request, sess *session) {
	id, name := r.PathValue("id"), r.PathValue("action")

	a, ok := actions[name]
	if !ok {
		http.Error(w, fmt.Sprintf("no action %q", name), http.StatusNotFound)

		return
	}

	form, err := readForm(w, r)
	if err != nil {
		s.renderMachine(w, r, sess, http.StatusBadRequest, err.Error(), "", nil)

		return
	}

	if !checkCSRF(r, sess) {
		http.Error(w, "the form is stale or from another site: reload the page and try again", http.StatusForbidden)

		return
	}

	if a.owned && s.opts.OmniURL != "" {
		s.renderMachine(w, r, sess, http.StatusForbidden,
			fmt.Sprintf("%s is Omni's to decide in this provider's mode: do it in Omni (%s).", a.title, s.opts.OmniURL), "", nil)

		return
	}

	if a.confirm != nil && form.Get("confirmed") != "yes" {
		message := a.confirm(id, form)

		if a.preview != nil {
			what, err := a.preview(r.Context(), s.opts.Transitions, id, form)
			if err != nil {
				s.refused(w, r, sess, name, a.title, id, form, err)

				return
			}

			message += " " + what
		}

		fields := url.Values{}

		for k, v := range form {
			if k != "csrf" && k != "confirmed" {
				fields[k] = v
			}
		}

		s.render(w, http.StatusOK, "confirm", confirmData{
			pageData: s.page(sess, a.title+" "+id), ID: id, Action: name, Title: a.title,
			Message: message, Fields: fields,
		})

		return
	}

	notice, err := a.run(r.Context(), s.opts.Transitions, id, form)
	if err != nil {
		s.refused(w, r, sess, name, a.title, id, form, err)

		return
	}

	s.logger.Info("console action", zap.String("action", name), zap.String("machine", id), zap.String("by", sess.who))
	s.opts.Trace.Note(id, fmt.Sprintf("%s from the console (%s)", notice, sess.who))

	http.Redirect(w, r, "/ui/machines/"+url.PathEscape(id)+"?done="+url.QueryEscape(notice), http.StatusSeeOther)
}

// refused shows the machine's page with why the action was refused and the form as sent
// (less its secrets and its CSRF token).
func (s *Server) refused(w http.ResponseWriter, r *http.Request, sess *session, name, title, id string, form url.Values, err error) {
	status := statusOf(err)
	if status == http.StatusInternalServerError {
		s.logger.Error("console action failed", zap.String("action", name), zap.String("machine", id), zap.Error(err))
	}

	form.Del("password")
	form.Del("csrf")
	form.Del("confirmed")
	s.renderMachine(w, r, sess, status, title+": "+err.Error(), "", form)
}

// allocationRequest is the allocation the Allocate form asks for.
func allocationRequest(form url.Values) (transitions.AllocationRequest, error) {
	config, err := formConfig(form)
	if err != nil {
		return transitions.AllocationRequest{}, &transitions.Error{Code: transitions.CodeInvalid, Msg: err.Error()}
	}

	return transitions.AllocationRequest{
		TalosVersion:         strings.TrimSpace(form.Get("talos_version")),
		Extensions:           splitList(form.Get("extensions")),
		KernelArgs:           strings.Fields(form.Get("kernel_args")),
		Config:               config,
		NoDetectedExtensions: form.Get("no_detected_extensions") == "on",
		InstallDisk:          strings.TrimSpace(form.Get("install_disk")),
	}, nil
}

type confirmData struct {
	pageData

	ID, Action, Title, Message string
	Fields                     url.Values
}

// readForm reads a posted form, bounded, with an uploaded machine config (config) read
// into config_b64: base64, so that the confirmation page carries it back byte for byte
// (a browser turns a form value's line ends into CRLF).
func readForm(w http.ResponseWriter, r *http.Request) (url.Values, error) {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormSize)

	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")) // an unparsable type is refused below
	switch mt {
	case "multipart/form-data":
		if err := r.ParseMultipartForm(maxFormSize); err != nil { //nolint:gosec // the body is bounded by MaxBytesReader above
			return nil, formError(err)
		}
	case "application/x-www-form-urlencoded":
		if err := r.ParseForm(); err != nil {
			return nil, formError(err)
		}
	default:
		return nil, fmt.Errorf("a form is posted as application/x-www-form-urlencoded or multipart/form-data, not %q", mt)
	}

	form := r.PostForm

	f, _, err := r.FormFile("config")

	switch {
	case err == nil:
		defer f.Close()

		data, err := io.ReadAll(io.LimitReader(f, transitions.MaxConfigSize+1))
		if err != nil {
			return nil, fmt.Errorf("error reading the uploaded machine config: %w", err)
		}

		if len(data) > transitions.MaxConfigSize {
			return nil, fmt.Errorf("the machine config is larger than %d bytes", transitions.MaxConfigSize)
		}

		if len(data) > 0 {
			form.Set("config_b64", base64.StdEncoding.EncodeToString(data))
		}
	case errors.Is(err, http.ErrMissingFile), errors.Is(err, http.ErrNotMultipart):
	default:
		return nil, fmt.Errorf("error reading the uploaded machine config: %w", err)
	}

	return form, nil
}

func formError(err error) error {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return fmt.Errorf("the form is larger than %d bytes", tooBig.Limit)
	}

	return fmt.Errorf("the form could not be read: %w", err)
}

// formConfig is the machine config the form carries, none when it carries none.
func formConfig(form url.Values) ([]byte, error) {
	b64 := form.Get("config_b64")
	if b64 == "" {
		return nil, nil
	}

	config, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, fmt.Errorf("the machine config in the form is not base64: upload the file again")
	}

	if len(config) > transitions.MaxConfigSize {
		return nil, fmt.Errorf("the machine config is larger than %d bytes", transitions.MaxConfigSize)
	}

	return config, nil
}

// statusOf maps a transition's refusal onto an HTTP status.
func statusOf(err error) int {
	switch transitions.CodeOf(err) {
	case transitions.CodeInvalid:
		return http.StatusBadRequest
	case transitions.CodeNotFound:
		return http.StatusNotFound
	case transitions.CodeRefused:
		return http.StatusConflict
	case transitions.CodeManaged:
		return http.StatusForbidden
	case transitions.CodeUnavailable:
		return http.StatusNotImplemented
	default:
		return http.StatusInternalServerError
	}
}

// splitList splits on commas and white space.
func splitList(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\r' || r == '\t' })
}

// parseLabels reads key=value pairs separated by commas or white space.
func parseLabels(s string) (map[string]string, error) {
	out := map[string]string{}

	for _, kv := range splitList(s) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("label %q is not key=value", kv)
		}

		out[k] = v
	}

	return out, nil
}
