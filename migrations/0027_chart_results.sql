-- 0027: the charts an assistant reply showed (show_chart): [{id, call_id, spec}], in the order
-- they were drawn, each a Vega-Lite spec whose data are the rows of the call `call_id` of the
-- same turn (see functions/chat/src/turn/chart.rs). Stored with the turn, so a conversation
-- read back shows the same charts; a failed or interrupted turn keeps those it drew.
ALTER TABLE chat.messages ADD COLUMN charts jsonb NOT NULL DEFAULT '[]'::jsonb;
