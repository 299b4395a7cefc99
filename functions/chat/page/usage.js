// The usage view: tokens, calls, errors and cost per user, model and day (GET api/usage).
// Members of the admin group (ADMIN_GROUP) see everyone's; others their own.

/** Wires the usage view's controls (issue 37: built by its own change). */
export function setUpUsage() {}
