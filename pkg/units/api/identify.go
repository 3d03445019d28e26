package api

import "net/http"

// Caller is who sent a request, for handlers outside this package that
// share the API's access control (the query guard under /tsdb).
type Caller struct {
	User  string
	Admin bool
}

// Identify returns who sent r, as the API's own endpoints see them. Its
// errors carry their status (HTTPStatus: 401 no or unknown credentials,
// 403 an untrusted header, 400 a malformed one).
func (a *Access) Identify(r *http.Request) (Caller, error) {
	id, err := a.identify(r)
	if err != nil {
		return Caller{}, err
	}
	return Caller{User: id.user, Admin: id.admin}, nil
}

// HTTPStatus is the status the failure is answered with.
func (e *accessError) HTTPStatus() int { return e.status }
