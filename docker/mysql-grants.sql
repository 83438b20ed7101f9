-- Run by the database image at its first start (docker-compose.yml): the eoskit
-- user may create databases and list prepared XA transactions (MySQL 8's ALL
-- on *.* includes XA_RECOVER_ADMIN; MariaDB's includes what XA RECOVER needs).
GRANT ALL PRIVILEGES ON *.* TO 'eoskit'@'%';
FLUSH PRIVILEGES;
