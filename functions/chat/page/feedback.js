// Feedback on a reply: thumbs up or down with an optional comment
// (PUT api/conversations/{id}/messages/{seq}/feedback).

/** The feedback controls of one assistant message (issue 37: built by its own change). */
export function feedbackControls() {
  return null;
}
