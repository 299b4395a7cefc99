//! Usage and cost: the `chat.turn_usage` ledger summed per user, model or day, priced by
//! `MODEL_PRICES`; what `GET /api/usage` (the chat) and `parley usage` (the command) both report.
