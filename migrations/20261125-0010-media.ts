import type { Sequelize } from "sequelize";

/**
 * Media (issue 16).
 *
 * `media`: one row per uploaded image or video of an account, what GET /media lists (newest first).
 * The file lives under MEDIA_DIR of the node named by `node_id` (the one that stored it), as
 * `<id>`; a gateway pulls it from there range by range. `content_type` is judged by the
 * file's content (the answers' `kind`, image or video, follows from it); `width`/`height` (images) and `duration_ms` (MP4 `mvhd`) come
 * from the file's header where it gives them.
 *
 * `media_references`: who refers to a media (`owner`, e.g. `campaign:<uuid>` or `reply:<uuid>`),
 * registered and released by the services that use media through `media.reference` and
 * `media.release`. A media with a reference cannot be deleted (409); the foreign key keeps it so
 * even against a writer that skipped the check.
 */
export async function up(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`
    CREATE TABLE media (
      id            uuid PRIMARY KEY,
      company_id    text NOT NULL,
      file_name     text NOT NULL,
      content_type  text NOT NULL CHECK (content_type IN ('image/jpeg', 'image/png', 'image/gif', 'image/webp', 'video/mp4')),
      size          bigint NOT NULL CHECK (size > 0),
      sha256        text NOT NULL,
      width         integer,
      height        integer,
      duration_ms   bigint,
      node_id       text NOT NULL,
      created_at    timestamptz NOT NULL DEFAULT now()
    );
    CREATE INDEX media_company ON media (company_id, created_at DESC, id DESC);

    CREATE TABLE media_references (
      company_id  text NOT NULL,
      owner       text NOT NULL,
      media_id    uuid NOT NULL REFERENCES media (id) ON DELETE RESTRICT,
      created_at  timestamptz NOT NULL DEFAULT now(),
      PRIMARY KEY (company_id, owner, media_id)
    );
    CREATE INDEX media_references_media ON media_references (media_id);
  `);
}

export async function down(sequelize: Sequelize): Promise<void> {
  await sequelize.query(`DROP TABLE media_references; DROP TABLE media;`);
}
