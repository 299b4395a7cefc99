-- After the data (data/*.sql): Chinook's foreign keys and their indexes, as upstream's
-- Chinook_PostgreSql.sql (1.4.5) makes them, then the grants. The distractor schemas have no
-- keys: their CSVs declare none.

ALTER TABLE chinook.album ADD CONSTRAINT album_artist_id_fkey
    FOREIGN KEY (artist_id) REFERENCES chinook.artist (artist_id) ON DELETE NO ACTION ON UPDATE NO ACTION;
CREATE INDEX album_artist_id_idx ON chinook.album (artist_id);

ALTER TABLE chinook.customer ADD CONSTRAINT customer_support_rep_id_fkey
    FOREIGN KEY (support_rep_id) REFERENCES chinook.employee (employee_id) ON DELETE NO ACTION ON UPDATE NO ACTION;
CREATE INDEX customer_support_rep_id_idx ON chinook.customer (support_rep_id);

ALTER TABLE chinook.employee ADD CONSTRAINT employee_reports_to_fkey
    FOREIGN KEY (reports_to) REFERENCES chinook.employee (employee_id) ON DELETE NO ACTION ON UPDATE NO ACTION;
CREATE INDEX employee_reports_to_idx ON chinook.employee (reports_to);

ALTER TABLE chinook.invoice ADD CONSTRAINT invoice_customer_id_fkey
    FOREIGN KEY (customer_id) REFERENCES chinook.customer (customer_id) ON DELETE NO ACTION ON UPDATE NO ACTION;
CREATE INDEX invoice_customer_id_idx ON chinook.invoice (customer_id);

ALTER TABLE chinook.invoice_line ADD CONSTRAINT invoice_line_invoice_id_fkey
    FOREIGN KEY (invoice_id) REFERENCES chinook.invoice (invoice_id) ON DELETE NO ACTION ON UPDATE NO ACTION;
CREATE INDEX invoice_line_invoice_id_idx ON chinook.invoice_line (invoice_id);

ALTER TABLE chinook.invoice_line ADD CONSTRAINT invoice_line_track_id_fkey
    FOREIGN KEY (track_id) REFERENCES chinook.track (track_id) ON DELETE NO ACTION ON UPDATE NO ACTION;
CREATE INDEX invoice_line_track_id_idx ON chinook.invoice_line (track_id);

ALTER TABLE chinook.playlist_track ADD CONSTRAINT playlist_track_playlist_id_fkey
    FOREIGN KEY (playlist_id) REFERENCES chinook.playlist (playlist_id) ON DELETE NO ACTION ON UPDATE NO ACTION;
CREATE INDEX playlist_track_playlist_id_idx ON chinook.playlist_track (playlist_id);

ALTER TABLE chinook.playlist_track ADD CONSTRAINT playlist_track_track_id_fkey
    FOREIGN KEY (track_id) REFERENCES chinook.track (track_id) ON DELETE NO ACTION ON UPDATE NO ACTION;
CREATE INDEX playlist_track_track_id_idx ON chinook.playlist_track (track_id);

ALTER TABLE chinook.track ADD CONSTRAINT track_album_id_fkey
    FOREIGN KEY (album_id) REFERENCES chinook.album (album_id) ON DELETE NO ACTION ON UPDATE NO ACTION;
CREATE INDEX track_album_id_idx ON chinook.track (album_id);

ALTER TABLE chinook.track ADD CONSTRAINT track_genre_id_fkey
    FOREIGN KEY (genre_id) REFERENCES chinook.genre (genre_id) ON DELETE NO ACTION ON UPDATE NO ACTION;
CREATE INDEX track_genre_id_idx ON chinook.track (genre_id);

ALTER TABLE chinook.track ADD CONSTRAINT track_media_type_id_fkey
    FOREIGN KEY (media_type_id) REFERENCES chinook.media_type (media_type_id) ON DELETE NO ACTION ON UPDATE NO ACTION;
CREATE INDEX track_media_type_id_idx ON chinook.track (media_type_id);

-- Ad-hoc SQL (docs/sql.md) reads the three schemas as parley_sql_reader, and the tools as
-- parley_readonly (migrations/0001_roles.sql); read, nothing more. Granted anew on each load:
-- the tables are new.
GRANT USAGE ON SCHEMA chinook, lahman, nycflights13 TO parley_readonly, parley_sql_reader;
GRANT SELECT ON ALL TABLES IN SCHEMA chinook, lahman, nycflights13 TO parley_readonly, parley_sql_reader;
